// Host side of the Mamba-2 backward: the dt pass (the forward's), then the two walks on the persistent grid
// (backward_for<P, N, CONFIG>, dispatched in mamba2_bwd.cu). No argument cache: the gradients' buffers are new
// allocations on every call, so their TMA maps would rarely repeat.
#pragma once

#include "mamba2_bwd_kernel.cuh"
#include "mamba2_scan_launch.cuh"

namespace tk_mamba2 {

template <typename K> typename K::globals bwd_globals(const bwd_problem &bp, const workspace_layout &w, bool dc_walk) {
    using T = typename K::x_gl::T;
    const fwd_problem &p = bp.f;
    const stage_maps<K> m = stage_maps_of<K>(p, w, bp.workspace);
    float *ws = static_cast<float *>(bp.workspace);
    typename K::acc_gl grad(dc_walk ? bp.dC : bp.dB, p.batch, p.groups, w.padded_len, p.state_dim);
    const int task_heads = p.heads / K::HEADS_PER_TASK;
    return typename K::globals{heads_map<K>(p.x, p), heads_map<K>(bp.dy, p), m.B, m.C, m.dt, m.cum, m.seq, grad,
                               bp.d_cum, bp.x_dot,
                               p.seq_idx ? ws + w.seq_offset : nullptr,
                               dc_walk ? p.initial_states : bp.d_final_states,
                               dc_walk ? bp.d_final_states : nullptr,
                               dc_walk ? nullptr : bp.d_initial_states,
                               p.D, dc_walk ? bp.dD : nullptr, static_cast<T *>(bp.dx),
                               p.D_per_channel ? 1 : 0, p.heads, p.heads / p.groups, w.chunks, p.len, w.padded_len,
                               p.batch * task_heads, p.seq_idx ? 1 : 0, task_heads};
}

template <typename T, int P, int N, scan_config CFG>
cudaError_t launch_backward(const bwd_problem &bp, cudaStream_t stream) {
    const workspace_layout w(bp.f);
    fwd_problem prep = bp.f;
    prep.workspace = bp.workspace;
    if (cudaError_t e = launch_prepare(prep, w, stream); e != cudaSuccess) return e;
    using DC = mamba2_bwd_dc<T, P, N, CFG>;
    using DX = mamba2_bwd_dx<T, P, N, CFG>;
    const auto gc = bwd_globals<DC>(bp, w, true);
    if (cudaError_t e = kittens::lcsf::launch<DC>(gc, gc.num_tasks, stream); e != cudaSuccess) return e;
    const auto gx = bwd_globals<DX>(bp, w, false);
    return kittens::lcsf::launch<DX>(gx, gx.num_tasks, stream);
}

template <int P, int N, scan_config CFG> cudaError_t backward_for(const bwd_problem &bp, cudaStream_t stream) {
    if (bp.f.type == dtype::bf16) return launch_backward<kittens::bf16, P, N, CFG>(bp, stream);
    return launch_backward<kittens::half, P, N, CFG>(bp, stream);
}

} // namespace tk_mamba2
