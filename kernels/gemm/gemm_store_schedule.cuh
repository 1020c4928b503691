// When the deferred store's pieces go out (gemm_pipeline.cuh): a task's STORE_PIECES output pieces are stored
// during the next task, after its computes. A task with at least twice as many stages takes one piece after each of
// its first computes; a shorter one takes all of them after its first compute: spreading the pieces only pays when
// the task has stages to spare, since with every stage followed by a piece each stage waits for one.
//
// With STORE_PHASES = F > 1, block x starts those pieces (x % F) / F of a task later, so that only 1 / F of the SMs
// write at once.
#pragma once

namespace tk_gemm {

// The pieces [first, last) of kernel K's deferred store to issue after compute(i) of a task with `iters` stages.
template <typename K> __device__ inline void store_pieces_after(int i, int iters, int &first, int &last) {
    constexpr int PIECES = K::STORE_PIECES, PHASES = K::STORE_PHASES;
    const int phase = PHASES > 1 ? int(blockIdx.x % PHASES) : 0;
    if (iters >= 2 * PIECES) {
        const int j = i - phase * (iters - PIECES) / PHASES;
        first = j >= 0 && j < PIECES ? j : PIECES;
        last = j < 0 ? 0 : j < PIECES ? j + 1 : PIECES;
    } else {
        const int start = phase * iters / PHASES;
        first = i == start ? 0 : PIECES;
        last = i >= start ? PIECES : 0;
    }
}

} // namespace tk_gemm
