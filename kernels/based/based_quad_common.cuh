// What the quadratic Based kernels (forward, and both backward passes) share: the pair weight and the order in which
// their tasks start.
#pragma once

#include "kittens.cuh"

namespace tk_based {
using namespace kittens;

// The pair weight w = 1 + s + s^2 / 2 of s = scale x (x the raw product q . k) as two FMAs: c1 = scale,
// c2 = scale^2 / 2.
struct pair_weight_of {
    float c1, c2;
    __host__ __device__ explicit pair_weight_of(float scale) : c1(scale), c2(0.5f * scale * scale) {}
    __device__ __forceinline__ float operator()(float x) const { return fmaf(x, fmaf(x, c2, c1), 1.f); }
};

// The quadratic kernels' task order. Tasks are drawn dynamically (LCSF's DYNAMIC_TASKS), so this is the order in
// which they start: heads in groups of heads_per_group, whose K and V the host sizes to fit well within L2, and
// inside a group by block, heaviest first (rank 0), then by head. The tasks running at one moment then read a few
// heads' tiles, from L2, and the short tasks come last. (By block over all heads, each head's tiles left L2
// between its blocks.)
struct quad_task_place {
    int bh, rank; // (batch, head) index, and the block's rank by weight (0: the heaviest)
};
__device__ inline quad_task_place quad_task_at(int id, int blocks, int total_heads, int heads_per_group) {
    const int group_tasks = heads_per_group * blocks;
    const int group = id / group_tasks, in_group = id - group * group_tasks;
    const int heads = min(heads_per_group, total_heads - group * heads_per_group); // the last group may be short
    return {group * heads_per_group + in_group % heads, in_group / heads};
}

} // namespace tk_based
