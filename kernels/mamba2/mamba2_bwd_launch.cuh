// Host side of the Mamba-2 backward: the dt pass (the forward's), then the two walks on the persistent grid
// (backward_for<P, N, HEAD_PAIR>, instantiated in mamba2_bwd.cu). No argument cache: the gradients' buffers are new
// allocations on every call, so their TMA maps would rarely repeat.
#pragma once

#include "mamba2_bwd_kernel.cuh"
#include "mamba2_launch.cuh"

namespace tk_mamba2 {

template <typename K> typename K::globals bwd_globals(const bwd_problem &bp, const workspace_layout &w, bool dc_walk) {
    using T = typename K::x_gl::T;
    const fwd_problem &p = bp.f;
    auto in = [](const void *x) { return reinterpret_cast<T *>(const_cast<void *>(x)); };
    const int P = p.head_dim, N = p.state_dim;
    typename K::x_gl x(in(p.x.ptr), p.batch, p.heads, p.len, P, p.x.stride_b, p.x.stride_h, p.x.stride_n);
    typename K::x_gl dy(in(bp.dy.ptr), p.batch, p.heads, p.len, P, bp.dy.stride_b, bp.dy.stride_h, bp.dy.stride_n);
    typename K::bc_gl B(in(p.B.ptr), p.batch, p.groups, p.len, N, p.B.stride_b, p.B.stride_h, p.B.stride_n);
    typename K::bc_gl C(in(p.C.ptr), p.batch, p.groups, p.len, N, p.C.stride_b, p.C.stride_h, p.C.stride_n);
    float *ws = static_cast<float *>(bp.workspace);
    typename K::vec_gl dt(ws, p.batch, p.heads, 1, w.padded_len);
    typename K::vec_gl cum(ws + w.vec_elems, p.batch, p.heads, 1, w.padded_len);
    typename K::vec_gl seq(p.seq_idx ? ws + w.seq_offset : ws, p.batch, 1, 1, w.padded_len);
    typename K::acc_gl grad(dc_walk ? bp.dC : bp.dB, p.batch, p.groups, w.padded_len, N);
    const int task_heads = p.heads / K::HEADS_PER_TASK;
    return typename K::globals{x, dy, B, C, dt, cum, seq, grad,
                               bp.d_cum, bp.x_dot,
                               p.seq_idx ? ws + w.seq_offset : nullptr,
                               dc_walk ? p.initial_states : bp.d_final_states,
                               dc_walk ? bp.d_final_states : nullptr,
                               dc_walk ? nullptr : bp.d_initial_states,
                               p.D, dc_walk ? bp.dD : nullptr, static_cast<T *>(bp.dx),
                               p.D_per_channel ? 1 : 0, p.heads, p.heads / p.groups, w.chunks, p.len, w.padded_len,
                               p.batch * task_heads, p.seq_idx ? 1 : 0, task_heads};
}

template <typename T, int P, int N, bool HEAD_PAIR> cudaError_t backward_for(const bwd_problem &bp, cudaStream_t stream) {
    const workspace_layout w(bp.f);
    fwd_problem prep = bp.f;
    prep.workspace = bp.workspace;
    if (cudaError_t e = launch_prepare(prep, w, stream); e != cudaSuccess) return e;
    using DC = mamba2_bwd_dc<T, P, N, HEAD_PAIR>;
    using DX = mamba2_bwd_dx<T, P, N, HEAD_PAIR>;
    const auto gc = bwd_globals<DC>(bp, w, true);
    if (cudaError_t e = kittens::lcsf::launch<DC>(gc, gc.num_tasks, stream); e != cudaSuccess) return e;
    const auto gx = bwd_globals<DX>(bp, w, false);
    return kittens::lcsf::launch<DX>(gx, gx.num_tasks, stream);
}

template <int P, int N, bool HEAD_PAIR> cudaError_t backward_dims(const bwd_problem &bp, cudaStream_t stream) {
    if (bp.f.type == dtype::bf16) return backward_for<kittens::bf16, P, N, HEAD_PAIR>(bp, stream);
    return backward_for<kittens::half, P, N, HEAD_PAIR>(bp, stream);
}

} // namespace tk_mamba2
