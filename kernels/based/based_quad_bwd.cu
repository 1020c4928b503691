// The quadratic Based backward's two passes (based_quad_bwd_kernel.cuh), per dtype and value tile width. Both draw
// their tasks from the one counter: launches on a stream run in order, and each leaves it zero.
#include "based_launch_maps.cuh"
#include "based_quad.h"
#include "based_quad_bwd_kernel.cuh"

namespace tk_based {

namespace {

template <typename T, int DV>
cudaError_t launch_quadratic_backward(const bwd_problem &p, const float *rinv, const float *dd, int padded_len,
                                      cudaStream_t stream) {
    using DQ = based_quad_dq<T, DV>;
    using DKV = based_quad_dkv<T, DV>;
    using B = based_quad_bwd_base<T, DV>;
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
    const typename DQ::globals dq_pass{q,
                                       input_map<typename DQ::k_gl>(p.k, p.batch, p.heads, p.len, B::DK),
                                       input_map<typename DQ::v_gl>(p.v, p.batch, p.heads, p.len, p.value_dim),
                                       dout, rows(rinv), rows(dd),
                                       output_map<typename B::qk_half_gl>(p.dq, p.batch, p.heads, p.len, B::DK),
                                       p.heads, p.len, blocks, tasks, p.scale, heads_per_group, p.task_counter};
    if (cudaError_t e = kittens::lcsf::launch<DQ>(dq_pass, tasks, stream); e != cudaSuccess) return e;
    const typename DKV::globals dkv_pass{q, k, v, dout, rows(rinv), rows(dd),
                                         output_map<typename B::qk_half_gl>(p.dk, p.batch, p.heads, p.len, B::DK),
                                         output_map<typename B::v_half_gl>(p.dv, p.batch, p.heads, p.len, p.value_dim),
                                         p.heads, p.len, blocks, tasks, p.scale, heads_per_group, p.task_counter};
    return kittens::lcsf::launch<DKV>(dkv_pass, tasks, stream);
}

template <typename T>
cudaError_t quadratic_backward_in(const bwd_problem &p, const float *rinv, const float *dd, int padded_len,
                                  cudaStream_t stream) {
    if (quad_value_width(p.value_dim) == 64) return launch_quadratic_backward<T, 64>(p, rinv, dd, padded_len, stream);
    return launch_quadratic_backward<T, 128>(p, rinv, dd, padded_len, stream);
}

} // namespace

cudaError_t quadratic_backward(const bwd_problem &p, const float *rinv, const float *dd, int padded_len,
                               cudaStream_t stream) {
    if (p.type == dtype::bf16) return quadratic_backward_in<kittens::bf16>(p, rinv, dd, padded_len, stream);
    return quadratic_backward_in<kittens::half>(p, rinv, dd, padded_len, stream);
}

} // namespace tk_based
