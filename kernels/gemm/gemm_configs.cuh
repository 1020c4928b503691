// The GEMM's configurations: every knob of the kernel (gemm_kernel.cuh) as a named field with a default, and the
// configurations that ship, by name. The entry points (gemm_bf16.cu, gemm_fp8.cu) and the developer tools
// instantiate the kernel from these names only, so a tool measures exactly what ships. Which configuration a
// problem gets is decided in gemm_select.cu.
//
// Plain C++ (no CUDA headers): the selection code and host tools read the numbers without the kernel.
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
} // namespace tk_gemm
