// Host side of the quadratic Based forward (based_quad_fwd_kernel.cuh): its globals, TMA maps included, and its launch
// per dtype and value tile width.
#pragma once

#include "based.h"
#include "based_configs.cuh"
#include "based_maps_launch.cuh"
#include "based_quad_fwd_kernel.cuh"

namespace tk_based {

template <typename T, int DV> cudaError_t launch_quadratic_forward(const fwd_problem &p, cudaStream_t stream) {
    using K = based_quad_fwd<T, DV>;
    const int blocks = (p.len + QUAD_BLOCK - 1) / QUAD_BLOCK;
    const typename K::globals g{input_map<typename K::qk_gl>(p.q, p.batch, p.heads, p.len, K::DK),
                                input_map<typename K::qk_gl>(p.k, p.batch, p.heads, p.len, K::DK),
                                input_map<typename K::v_gl>(p.v, p.batch, p.heads, p.len, p.value_dim),
                                output_map<typename K::v_gl>(p.o, p.batch, p.heads, p.len, p.value_dim),
                                p.den, p.heads, p.len, blocks, p.batch * p.heads * blocks, p.scale, p.eps,
                                p.normalize ? 1 : 0, quadratic_heads_per_group(p.len, DV), p.task_counter};
    return kittens::lcsf::launch<K>(g, g.num_tasks, stream);
}

template <typename T> cudaError_t quadratic_forward_in(const fwd_problem &p, cudaStream_t stream) {
    if (quad_value_width(p.value_dim) == 64) return launch_quadratic_forward<T, 64>(p, stream);
    return launch_quadratic_forward<T, 128>(p, stream);
}

} // namespace tk_based
