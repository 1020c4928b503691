// The configurations of the Mamba-2 kernels, as named fields, and which one a problem runs with. The kernels take them
// as template arguments: the scan kernels (mamba2_fwd_kernel.cuh, mamba2_bwd_kernel.cuh, through the task layout of
// mamba2_tasks.cuh) a scan_config, the dt pass (mamba2_prepare_kernel.cuh) a prepare_config, the decoding step
// (mamba2_step_kernel.cuh) a step_config. docs/mamba2.md has the measurements behind the choices.
//
// Plain C++ (no CUDA headers): host code reads the numbers without the kernels.
#pragma once

namespace tk_mamba2 {

// ---------------------------------------------------------------- the scans (forward and both backward walks)

// How a scan kernel splits a task among its consumer warpgroups. The backward's walks take the forward's
// configuration: their carried terms cancel only if both walk the tasks the forward walks.
struct scan_config {
    // A task is `consumers` heads of one group, one per consumer with all p columns each (head pairs); otherwise a
    // task is one head whose p columns the consumers split evenly. Either way a consumer needs nothing from another
    // (no barrier between them); the price is that C B^T, which the heads of a group share, is computed once per
    // consumer.
    bool head_pair = false;
    // Consumer warpgroups per block, each holding the state of its columns (n x columns, fp32) in registers.
    int consumers = 2;
    // Two consumers and a producer are 384 threads, so ptxas fits each thread in 168 registers; the producer only
    // issues TMA loads and hands its registers to the consumers, which hold the state and the chunk's products
    // (128 x 24 + 256 x 240 fits the register file).
    int producer_registers = 24;
    int consumer_registers = 240;
    // Input ring stages at most: as many as fit next to the output block and the ring's semaphores in shared memory,
    // up to this (the kernels need two).
    int max_stages = 4;
};

namespace configs {

// p = 64 and an even number of heads per group: two heads of one group per task. Per head and chunk the tensor cores
// then do less work than with halves (C B^T once per head instead of twice, with wider wgmmas; docs/mamba2.md).
constexpr scan_config head_pairs() { return {.head_pair = true}; }
// Everything else (p = 128: a consumer holds a whole head's state only for p = 64; or an odd number of heads per
// group): one head per task, its p columns in halves.
constexpr scan_config halves() { return {}; }

} // namespace configs

// Head pairs need a whole head's state per consumer (p = 64) and a task's heads from one group.
constexpr bool use_head_pairs(int head_dim, int heads_per_group) {
    return head_dim == 64 && heads_per_group % configs::head_pairs().consumers == 0;
}

// The scan kernels that ship: p and n each 64 or 128, with head pairs where use_head_pairs() picks them. Calls
// `launch.template operator()<P, N, CONFIG>()` for the problem's variant (the forward's and the backward's dispatch).
template <typename LAUNCH>
auto with_scan_variant(int head_dim, int state_dim, int heads_per_group, const LAUNCH &launch) {
    if (head_dim == 128) {
        return state_dim == 64 ? launch.template operator()<128, 64, configs::halves()>()
                               : launch.template operator()<128, 128, configs::halves()>();
    }
    if (use_head_pairs(head_dim, heads_per_group)) {
        return state_dim == 64 ? launch.template operator()<64, 64, configs::head_pairs()>()
                               : launch.template operator()<64, 128, configs::head_pairs()>();
    }
    return state_dim == 64 ? launch.template operator()<64, 64, configs::halves()>()
                           : launch.template operator()<64, 128, configs::halves()>();
}

// ---------------------------------------------------------------- the dt pass

struct prepare_config {
    // Heads per block: one 128-byte row of dt (heads innermost) per token, read coalesced.
    int heads = 32;
    // Threads per block: eight warps, each scanning the chunk of one head at a time.
    int threads = 256;
};

namespace configs {
constexpr prepare_config prepare() { return {}; }
} // namespace configs

// ---------------------------------------------------------------- the decoding step

struct step_config {
    // Warps per block: with unroll, the rows of head_dim one block covers (warps x rows per warp x unroll).
    int warps = 4;
    // Row sets a warp loads before using any: each lane keeps that many 16-byte loads of the state in flight (the
    // kernel is bound by memory bandwidth).
    int unroll = 4;
};

namespace configs {
constexpr step_config step() { return {}; }
} // namespace configs

} // namespace tk_mamba2
