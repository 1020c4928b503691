// The attention kernels' configurations: one named struct per direction, chosen per head dimension. Plain C++ (no
// CUDA or library types), so that attention.h's host-side rules (task sizes, the dQ accumulator's layout) read the
// same numbers as the kernels (attention_fwd_kernel.cuh, attention_bwd_kernel.cuh), and binding.cpp compiles it
// without CUDA. docs/attention.md has the measurements behind the choices for D = 64 and 128 and the reasoning for
// D = 96 and 256.
#pragma once

namespace tk_attention {

// A block's register file is 64K registers. setmaxnreg only redistributes what the launch gave every thread (65536 /
// threads, rounded down to a multiple of 8): a request past that pool hangs in setmaxnreg.
constexpr bool registers_fit(int consumers, int producer_registers, int consumer_registers) {
    const int threads = 128 * (consumers + 1);
    const int at_launch = 65536 / threads / 8 * 8;
    return 128 * (consumers * consumer_registers + producer_registers) <= at_launch * threads;
}

struct fwd_config {
    int consumers = 0; // consumer warpgroups, 64 query rows each
    int kv = 0;        // keys per K / V tile
    int kv_softcap = 0; // keys per tile with a softcap, whose tanh holds more registers per score
    int kv_window = 0;         // keys per tile for sliding windows narrower than short_window_keys (0: none)
    int short_window_keys = 0; // left + right below this takes kv_window
    int stages = 0;    // K / V ring stages
    int q_slots = 0;   // Q tiles per consumer: with 2 the next task's Q loads while this one runs
    int producer_registers = 0, consumer_registers = 0;
};

// Shared memory holds the ring (2 x kv x D x 2 bytes per stage) and consumers x q_slots Q tiles (64 x D x 2 bytes)
// within 227 KB; each consumer holds O (64 x D fp32) and the scores (64 x kv fp32) in registers.
constexpr fwd_config fwd_config_for(int head_dim) {
    switch (head_dim) {
    // Three consumers overlap each other's softmax and products; 3 x 160 + 32 registers per lane are the whole file
    // (the producer's task draw spilled at 24). D = 64: 3 x 44 KB + 48 KB of Q slots, and 192-key tiles spill.
    // D = 128: 2 x 56 KB + 96 KB; 128-key tiles would leave no room for the second Q slot. With a softcap, 176-key
    // tiles spill at D = 64 and 144 do not; at D = 128 112-key tiles spill (28 bytes) and 96 do not. A window of W
    // keys makes a consumer's 64 rows span W + 64 keys: at D = 64, 128-key tiles waste fewer of them than 176 up to
    // W ~ 2K (docs/attention.md, "The band").
    case 64:
        return {.consumers = 3, .kv = 176, .kv_softcap = 144, .kv_window = 128, .short_window_keys = 2048, .stages = 3, .q_slots = 2,
                .producer_registers = 32, .consumer_registers = 160};
    case 128:
        return {.consumers = 3, .kv = 112, .kv_softcap = 96, .stages = 2, .q_slots = 2, .producer_registers = 32,
                .consumer_registers = 160};
    // D = 96: 3 x 48 KB + 72 KB. O takes 48 registers and the scores of 128 keys 64, about D = 128's budget.
    case 96:
        return {.consumers = 3, .kv = 128, .kv_softcap = 128, .stages = 3, .q_slots = 2, .producer_registers = 32,
                .consumer_registers = 160};
    // D = 256: O alone is 128 registers per thread, so two consumers at 232 (2 x 232 + 40 = 504 is the pool of 384
    // threads at 168). A Q tile is 32 KB: one slot per consumer (64 KB) and 2 stages of 80 keys (2 x 80 KB) fill
    // 224 KB, where two slots would leave room for 32-key tiles only.
    case 256:
        return {.consumers = 2, .kv = 80, .kv_softcap = 80, .stages = 2, .q_slots = 1, .producer_registers = 40,
                .consumer_registers = 232};
    default:
        return {};
    }
}

struct bwd_config {
    // false: each consumer owns 64 keys of the task with their whole dK and dV rows. true: both consumers work on the
    // same 64 keys, consumer e on head-dimension columns [e D / 2, (e + 1) D / 2) of dK, dV and dQ and on query
    // columns [e block_q / 2, (e + 1) block_q / 2) of S^T and dP^T, exchanging P^T and dS^T through shared memory.
    bool split_head_dims = false;
    int block_q = 0; // query rows per step
    int stages = 0;  // (Q, dO, LSE, delta) ring stages
    int producer_registers = 0, consumer_registers = 0;
    bool dq_transposed = false; // the kernel computes dQ^T = K^T dS^T: the accumulator is (batch, heads, D, rows)
    int dq_piece_cols = 0;      // columns of one fp32 dQ staging tile (64 rows)
    bool converts_dq = false;   // blocks out of tasks convert finished heads' dQ (one float4 per lane covers a row)

    static constexpr int CONSUMERS = 2;
    constexpr int block_k() const { return split_head_dims ? 64 : 64 * CONSUMERS; } // keys per task
};

// Shared memory holds the ring (Q and dO, block_q x D each), K and V (block_k x D each), the dS^T tiles and the fp32
// dQ staging tiles within 227 KB. Registers: dK and dV (2 x 64 x D fp32 per warpgroup, halved when the head
// dimensions are split), S^T and dP^T (2 x 64 x block_q fp32), and later the step's dQ product.
constexpr bwd_config bwd_config_for(int head_dim) {
    switch (head_dim) {
    // D = 64: dQ^T = K^T dS^T (48 KB of shared operands per step instead of 64 KB for two halves of dS K); 64-row
    // query tiles were 7-19% slower (per-step fixed costs).
    case 64:
        return {.block_q = 128, .stages = 2, .producer_registers = 24, .consumer_registers = 240, .dq_transposed = true,
                .dq_piece_cols = 64};
    // D = 96 and 128: S^T and dP^T stay at 32 registers each next to 2 x 48 (2 x 64) of dK and dV, where wider query
    // tiles do not fit. D = 128 fills shared memory; a third stage measured 0.994-1.017 at D = 64 and 128, so D = 96
    // keeps two (178 KB).
    case 96:
        return {.block_q = 64, .stages = 2, .producer_registers = 24, .consumer_registers = 240, .dq_piece_cols = 32};
    case 128:
        return {.block_q = 64, .stages = 2, .producer_registers = 24, .consumer_registers = 240, .dq_piece_cols = 64,
                .converts_dq = true};
    // D = 256: dK and dV of 64 keys would take 2 x 128 registers per thread, hence the split head dimensions. Two
    // stages (2 x 65 KB), K and V (64 KB), the P^T and dS^T exchange tiles (2 x 8 KB) and an 8 KB staging tile per
    // consumer fill 227 KB.
    case 256:
        return {.split_head_dims = true, .block_q = 64, .stages = 2, .producer_registers = 24, .consumer_registers = 240,
                .dq_piece_cols = 32};
    default:
        return {};
    }
}

} // namespace tk_attention
