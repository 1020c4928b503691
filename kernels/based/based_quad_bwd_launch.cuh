// Host side of the quadratic Based backward's two passes (based_quad_bwd_dq_kernel.cuh, based_quad_bwd_dkv_kernel.cuh):
// their globals, TMA maps included, and their launches per dtype and value tile width. Both draw their tasks from the
// one counter: launches on a stream run in order, and each leaves it zero.
#pragma once

#include "based.h"
#include "based_configs.cuh"
#include "based_maps_launch.cuh"
#include "based_quad_bwd_dkv_kernel.cuh"
#include "based_quad_bwd_dq_kernel.cuh"

namespace tk_based {

template <typename T, int DV>
cudaError_t launch_quadratic_backward(const bwd_problem &p, const float *rinv, const float *dd, int padded_len,
                                      cudaStream_t stream) {
    using B = based_quad_bwd<T, DV>;
    using DQ = typename B::dq_pass;
    using DKV = typename B::dkv_pass;
    const int blocks = (p.len + QUAD_BLOCK - 1) / QUAD_BLOCK, tasks = p.batch * p.heads * blocks;
    const int heads_per_group = quadratic_heads_per_group(p.len, DV); // each pass streams one side's rows
    const auto q = input_map<typename B::qk_half_gl>(p.q, p.batch, p.heads, p.len, B::DK);
    const auto k = input_map<typename B::qk_half_gl>(p.k, p.batch, p.heads, p.len, B::DK);
    const auto v = input_map<typename B::v_half_gl>(p.v, p.batch, p.heads, p.len, p.value_dim);
    const auto dout = input_map<typename B::v_half_gl>(p.d_o, p.batch, p.heads, p.len, p.value_dim);
    const auto rows = [&](const float *x) {
        const int64_t head_rows = padded_len;
        return output_map<typename B::row_gl>(const_cast<float *>(x), 1, p.batch, p.heads, padded_len,
                                              p.batch * p.heads * head_rows, p.heads * head_rows, head_rows);
    };
    const typename DQ::globals dq_globals{q,
                                          input_map<typename DQ::k_gl>(p.k, p.batch, p.heads, p.len, B::DK),
                                          input_map<typename DQ::v_gl>(p.v, p.batch, p.heads, p.len, p.value_dim),
                                          dout, rows(rinv), rows(dd),
                                          output_map<typename B::qk_half_gl>(p.dq, p.batch, p.heads, p.len, B::DK),
                                          p.heads, p.len, blocks, tasks, p.scale, heads_per_group, p.task_counter};
    if (cudaError_t e = kittens::lcsf::launch<DQ>(dq_globals, tasks, stream); e != cudaSuccess) return e;
    const typename DKV::globals dkv_globals{
        q, k, v, dout, rows(rinv), rows(dd), output_map<typename B::qk_half_gl>(p.dk, p.batch, p.heads, p.len, B::DK),
        output_map<typename B::v_half_gl>(p.dv, p.batch, p.heads, p.len, p.value_dim), p.heads, p.len, blocks, tasks,
        p.scale, heads_per_group, p.task_counter};
    return kittens::lcsf::launch<DKV>(dkv_globals, tasks, stream);
}

template <typename T>
cudaError_t quadratic_backward_in(const bwd_problem &p, const float *rinv, const float *dd, int padded_len,
                                  cudaStream_t stream) {
    if (quad_value_width(p.value_dim) == 64) return launch_quadratic_backward<T, 64>(p, rinv, dd, padded_len, stream);
    return launch_quadratic_backward<T, 128>(p, rinv, dd, padded_len, stream);
}

} // namespace tk_based
