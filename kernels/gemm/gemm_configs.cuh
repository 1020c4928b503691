// The GEMM's configurations: every knob of the kernel (gemm_kernel.cuh) as a named field with a default, the
// configurations that ship, by name, and the rules that pick one for a problem. The entry points (gemm_bf16.cu,
// gemm_fp8.cu) and the developer tools instantiate the kernel from these names only, so a tool measures exactly what
// ships.
//
// Plain C++ (no CUDA headers): the interface (gemm.h), the binding and host tools read the names, the numbers and the
// picks without the kernel. The picks are pure functions of the problem's sizes and the GPU's SM count; the entry
// points ask the device for the count (gemm_launch.cuh).
//
// A configuration is a class-type template argument (C++20). Hand one to an alias template only inside a template
// (as the entry points and tools do): nvcc 13.0's host code generation fails on an alias template given a
// class-type argument in non-template code ("'__T0' was not declared in this scope").
#pragma once

namespace tk_gemm {

struct gemm_config {
    // Columns of C per task. A task is a (64 * consumers) x block_n block of C.
    int block_n = 256;
    // Depth of the shared-memory ring of K-slices between the producer and the consumers.
    int stages = 4;
    // Columns of C per epilogue piece (registers -> shared tile -> TMA store). The pieces of a task go out while the
    // next task's first stages compute, so the tensor cores keep working through the epilogue.
    int c_piece = 64;
    // Operands are loaded with L2 evict_last and C is stored with evict_first, so the output streaming through L2
    // does not push out the A and B panels other blocks are about to read.
    bool l2_hints = false;
    // Consumer warpgroups per block, 64 rows of C each (one for problems too small to fill the GPU).
    int consumers = 2;
    // Tasks are walked in bands of super_m block-rows, column by column: the blocks running at one moment share a
    // few A row-panels and B column-panels, which then stay in L2.
    int super_m = 16;
    // C = A @ B + bias, a row of N values added in fp32 before the one rounding to the output type (nn.Linear's
    // fused epilogue). A task's block_n bias values go to shared memory, which costs the big blocks half of their
    // epilogue buffers: give them c_piece = 32.
    bool bias = false;
    // For outputs too small to give every SM a block: the contraction is cut into ranges, and each task adds its
    // fp32 partial block into C (fp32, zeroed by the host) with a TMA reduce-add.
    bool split_k = false;
    // Blocks write their output `phases` ways apart within a task. The blocks otherwise run in near lockstep and
    // all write a task's block at the same moment, a burst the memory system drains slower than the same bytes
    // spread out.
    int phases = 1;
    // For contractions of at most RESIDENT_B_SLICES K-slices: the whole B panel of a block column stays in shared
    // memory while the block works down that column, and the ring streams A alone (a third of a stage's bytes). Each
    // block takes a contiguous run of tasks down the columns, so it loads B once (twice where its run crosses into
    // the next column), and warms L2 with the A rows of its next tasks: with inputs fresh from DRAM, a new task's A
    // reads would otherwise wait behind the output writes that keep DRAM busy.
    bool resident_b = false;
    // Epilogue pieces a warp may have in flight (0: two, or one where a piece is the whole block).
    int buffers = 0;
    // fp8: one scale per row of A and one per column of B (torch._scaled_mm's row-wise scales) instead of one per
    // tensor. A task's block_n column scales go to shared memory as the bias does (read from global memory in the
    // epilogue, they made ptxas spill in the 128 x 256 blocks).
    bool vector_scales = false;
};

// K elements of one K-slice: one 128-byte swizzle row of the input type.
constexpr int slice_k(int element_bytes) { return 128 / element_bytes; }
// The element size of the 16-bit entry point's inputs (bf16).
inline constexpr int BF16_BYTES = 2;
// The resident B panel holds at most this many K-slices (K <= 256 for 16-bit inputs).
inline constexpr int RESIDENT_B_SLICES = 4;

constexpr int block_m(const gemm_config &c) { return 64 * c.consumers; }
// Output blocks (tasks per contraction range) of an M x N product.
constexpr int num_tasks(const gemm_config &c, int M, int N) {
    return ((M + block_m(c) - 1) / block_m(c)) * ((N + c.block_n - 1) / c.block_n);
}

// The configurations that ship. Each 16-bit one also comes with a bias epilogue, used for the nn.Linear layout.
namespace configs {

// 128 x 256 blocks, 4-stage ring, 64-column epilogue pieces: the general configuration. With a bias the pieces are
// 32 columns wide: the bias takes the shared memory of the other half.
constexpr gemm_config big(bool bias = false) { return {.c_piece = bias ? 32 : 64, .bias = bias}; }
// The big blocks for short contractions, where the streamed-out C would evict the operand panels other blocks are
// about to read: L2 eviction hints, and the blocks' output writes in two phases half a task apart.
constexpr gemm_config hinted(bool bias = false) {
    return {.c_piece = bias ? 32 : 64, .l2_hints = true, .bias = bias, .phases = 2};
}
// Contractions of at most 256: the block column's B panel stays in shared memory and the ring streams A alone. The
// panel takes the shared memory the ring's B tiles had: 4 A stages, the panel and 2 epilogue buffers per warp. All
// blocks write at once: with the panel, one write phase measured better than two (docs/gemm.md).
constexpr gemm_config resident(bool bias = false) {
    return {.l2_hints = true, .bias = bias, .resident_b = true, .buffers = 2};
}
// 128 x 128 blocks, 5-stage ring: twice the tasks, for problems too small to fill the GPU with big blocks.
constexpr gemm_config small(bool bias = false) { return {.block_n = 128, .stages = 5, .c_piece = 128, .bias = bias}; }
// 64 x 128 blocks with one consumer warpgroup, 6-stage ring: for problems that would leave SMs idle even with
// 128 x 128 blocks.
constexpr gemm_config tiny(bool bias = false) {
    return {.block_n = 128, .stages = 6, .c_piece = 128, .consumers = 1, .bias = bias};
}
// The tiny blocks with an fp32 output that each task adds its partial sum into (split-K).
constexpr gemm_config split() { return {.block_n = 128, .stages = 6, .c_piece = 128, .consumers = 1, .split_k = true}; }

// fp8 (e4m3) inputs, per tensor or (vector_scales) row-wise scales. 128 x 256 blocks; with an fp32 output
// 128 x 128, which keeps the accumulators plus the stashed output within the register budget.
constexpr gemm_config fp8_big(bool fp32_out, bool vector_scales) {
    return {.block_n = fp32_out ? 128 : 256, .c_piece = fp32_out ? 128 : 64, .vector_scales = vector_scales};
}
// The 16-bit entry point's small and tiny blocks.
constexpr gemm_config fp8_small(bool vector_scales) {
    gemm_config c = small();
    c.vector_scales = vector_scales;
    return c;
}
constexpr gemm_config fp8_tiny(bool vector_scales) {
    gemm_config c = tiny();
    c.vector_scales = vector_scales;
    return c;
}

} // namespace configs

// The longest contraction the resident configuration holds: its B panel of RESIDENT_B_SLICES K-slices.
constexpr int resident_max_k(int element_bytes) { return RESIDENT_B_SLICES * slice_k(element_bytes); }

// ---------------------------------------------------------------- which configuration a problem runs

// The shipped configurations a call can name (gemm.h's problems). automatic: the one the problem's shape picks. The
// fp8 entry point runs big, small and tiny (each as its fp8_ form).
enum class config_id { automatic, big, hinted, resident, small, tiny };

// Their names, as the testing ops (binding.cpp) take and report them.
struct config_name {
    config_id id;
    const char *name;
};
inline constexpr config_name CONFIG_NAMES[] = {{config_id::automatic, "auto"}, {config_id::big, "big"},
                                               {config_id::hinted, "hinted"},  {config_id::resident, "resident"},
                                               {config_id::small, "small"},    {config_id::tiny, "tiny"}};
constexpr const char *name_of(config_id id) {
    for (const config_name &c : CONFIG_NAMES)
        if (c.id == id) return c.name;
    return "?";
}

namespace pick_rules {

// The largest blocks that still give at least half the SMs a block: small where big would leave more than half idle,
// tiny where even small would. Blocks that fill the GPU beat bigger ones here because a lone task cannot overlap its
// ring fill or its epilogue with anything.
constexpr config_id by_occupancy(const gemm_config &big, const gemm_config &small, int M, int N, int sms) {
    if (2 * num_tasks(small, M, N) <= sms) return config_id::tiny;
    if (2 * num_tasks(big, M, N) <= sms) return config_id::small;
    return config_id::big;
}

// Whether the resident-B configuration pays for a contraction its panel holds: each block's run of tasks down the
// columns should seldom cross into the next column, where the panel is reloaded with the ring stopped.
constexpr bool resident_pays(int M, int N, int sms) {
    constexpr gemm_config R = configs::resident();
    const int tiles_m = (M + block_m(R) - 1) / block_m(R), tiles = num_tasks(R, M, N);
    const int blocks = tiles < sms ? tiles : sms, run = (tiles + blocks - 1) / blocks;
    return tiles_m % run == 0 || 4 * run <= tiles_m;
}

} // namespace pick_rules

// The 16-bit GEMM's configuration for an M x N x K problem on a GPU of `sms` SMs, whatever the operands' memory order.
constexpr config_id pick_bf16(int M, int N, int K, int sms) {
    const config_id size = pick_rules::by_occupancy(configs::big(), configs::small(), M, N, sms);
    if (size != config_id::big) return size;
    if (K <= resident_max_k(BF16_BYTES) && pick_rules::resident_pays(M, N, sms)) return config_id::resident;
    // Short K: the streamed-out C would evict the operand panels other blocks are about to read; at long K the hints
    // cost a little, so long contractions keep the plain configuration.
    if (K <= 512) return config_id::hinted;
    return config_id::big;
}

// The fp8 GEMM's block size for an M x N problem: big, small or tiny (fp32_out: the output is fp32, whose big blocks
// are narrower).
constexpr config_id pick_fp8(int M, int N, bool fp32_out, int sms) {
    return pick_rules::by_occupancy(configs::fp8_big(fp32_out, false), configs::fp8_small(false), M, N, sms);
}

// Split-K's contraction ranges for the 16-bit GEMM (1: do not split). A contraction at least 16 K-slices long per
// range, over as many ranges as give every SM a block, when even the tiny blocks leave half the SMs idle (the weight
// gradient of a small Linear over many tokens: 512 x 512 over 8192 tokens is 32 tiny blocks).
constexpr int pick_splits(int M, int N, int K, int sms) {
    constexpr gemm_config S = configs::split();
    const int tiles = num_tasks(S, M, N);
    const int k_iters = (K + slice_k(BF16_BYTES) - 1) / slice_k(BF16_BYTES);
    if (2 * tiles > sms || k_iters < 32) return 1;
    const int by_sms = sms / tiles, by_length = k_iters / 16;
    const int splits = by_sms < by_length ? by_sms : by_length;
    return splits > 1 ? splits : 1;
}

} // namespace tk_gemm
