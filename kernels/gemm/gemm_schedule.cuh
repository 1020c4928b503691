// The GEMM's task order: which output block (and contraction range) task id is, and, for the resident-B
// configuration, the L2 prefetch of the A rows a block's coming tasks will read.
#pragma once

#include "kittens.cuh"

namespace tk_gemm {
using namespace kittens;

struct gemm_task {
    int m, n, k0, iters; // output block (row, column); first K-slice and K-slices of its contraction range
};

// Bands of SUPER_M block-rows walked column by column: the blocks running at one moment share a few A row-panels
// and B column-panels, which then stay in L2. Split-K repeats the walk once per contraction range.
template <int SUPER_M, typename G> __device__ inline bool banded_task(const G &g, int id, gemm_task &t) {
    const int tiles = g.tiles_m * g.tiles_n;
    if (id >= tiles * g.splits) return false;
    const int split = id / tiles;
    id -= split * tiles;
    int band = id / (SUPER_M * g.tiles_n);
    int first_m = band * SUPER_M;
    int rows = min(SUPER_M, g.tiles_m - first_m);
    int in_band = id - band * SUPER_M * g.tiles_n;
    t.m = first_m + in_band % rows;
    t.n = in_band / rows;
    t.k0 = split * g.k_per_split;
    t.iters = min(g.k_per_split, g.k_iters - t.k0);
    return true;
}

// Resident B: block x runs tasks [x * run, (x + 1) * run) in column-major order (run = ceil(tiles / blocks): no more
// rounds than any order), so consecutive tasks of a block share their B panel.
template <typename G> __device__ inline bool resident_run_task(const G &g, int id, gemm_task &t) {
    const int tiles = g.tiles_m * g.tiles_n;
    const int blocks = gridDim.x, run = (tiles + blocks - 1) / blocks;
    const int round = id / blocks, linear = (id - round * blocks) * run + round;
    if (round >= run || linear >= tiles) return false;
    t.n = linear / g.tiles_m;
    t.m = linear - t.n * g.tiles_m;
    t.k0 = 0;
    t.iters = g.k_iters;
    return true;
}
__device__ inline bool same_b_panel(const gemm_task &a, const gemm_task &b) { return a.n == b.n; }

// Resident B: L2 prefetches of the A rows a block's run of tasks reaches AHEAD tasks on (on the run's first task, of
// every row up to there), issued by the producer while it waits for a task's first stage. A row is read in the same
// round by the blocks of every block column (each run covers the same rows of its column), so the prefetch of its
// boxes (K-slices x consumers) is shared out: column n takes boxes n, n + tiles_n, ...; one TMA request per block
// and task in the common case. (Issued from load(), the same requests kept the producer's stage loop from
// unrolling.)
template <typename K> struct a_row_prefetch {
    static constexpr int AHEAD = 2;

    // The length of every block's run of tasks where the prefetch pays, else 0; set once at launch, so that the
    // producer divides nothing per task. It pays where every column's runs cover the same rows (otherwise a row's
    // boxes are not all prefetched by someone) and where the ring cannot hold a whole task ahead.
    __device__ static inline int &run() {
        __shared__ int length;
        return length;
    }
    __device__ static inline void prepare(const typename K::globals &g) {
        const int length = (g.tiles_m * g.tiles_n + gridDim.x - 1) / gridDim.x;
        run() = g.tiles_m % length == 0 && g.k_iters >= K::INPUT_STAGES ? length : 0;
    }
    __device__ static inline void before_loads(const typename K::globals &g, const gemm_task &t) {
        const int length = run(), first = blockIdx.x * length, linear = t.n * g.tiles_m + t.m;
        if (length == 0) return;
        const int last = min(first + length, g.tiles_m * g.tiles_n) - 1; // the run's last task
        const int boxes = g.k_iters * K::NUM_CONSUMERS;
        for (int ahead = linear == first ? 1 : AHEAD; ahead <= AHEAD; ahead++) {
            const int m = t.m + ahead;
            if (linear + ahead > last || m >= g.tiles_m) return; // past the run, or in the next column
            for (int box = t.n; box < boxes; box += g.tiles_n)
                tma::prefetch<typename K::a_tile>(g.a, K::a_coord(m, box % K::NUM_CONSUMERS, box / K::NUM_CONSUMERS));
        }
    }
};

} // namespace tk_gemm
