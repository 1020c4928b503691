// Included inside struct group<N_WARPS> (see group.cuh): no pragma once, no namespaces.
//
// Register reallocation (setmaxnreg): a warpgroup changes its per-thread register budget so that
// producer warpgroups, which only issue TMA, can hand registers to consumer warpgroups running
// wgmma. Every warp of the warpgroup must execute the same call. R is the new per-thread
// maximum: 24..256 and a multiple of 8. The kernel's launch budget (registers per thread x
// threads) is the pool: the sum over warpgroups must fit in it, and increase_registers blocks
// until enough registers have been released by decrease_registers elsewhere.

template <int R> __device__ static inline void increase_registers() {
    static_assert(GROUP_WARPS % 4 == 0 && R > 0, "setmaxnreg acts on whole warpgroups (group<4>, group<8>, ...)");
    static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg takes a register count in 24..256, a multiple of 8");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

template <int R> __device__ static inline void decrease_registers() {
    static_assert(GROUP_WARPS % 4 == 0 && R > 0, "setmaxnreg acts on whole warpgroups (group<4>, group<8>, ...)");
    static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg takes a register count in 24..256, a multiple of 8");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
