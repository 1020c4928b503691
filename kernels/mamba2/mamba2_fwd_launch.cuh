// Host side of the Mamba-2 forward: the dt pass, then the scan's globals (TMA maps included, cached) and its launch on
// the persistent grid (forward_for<P, N, CONFIG>, dispatched in mamba2_fwd.cu).
#pragma once

#include "common/globals_cache.cuh"
#include "mamba2_fwd_kernel.cuh"
#include "mamba2_scan_launch.cuh"

namespace tk_mamba2 {

template <typename K> cudaError_t launch_forward(const fwd_problem &p, cudaStream_t stream) {
    using G = typename K::globals;
    const workspace_layout w(p);
    if (cudaError_t e = launch_prepare(p, w, stream); e != cudaSuccess) return e;

    static tk_kernels::globals_cache<G, 26> cache; // the TMA maps depend on pointers, shapes and strides
    const typename tk_kernels::globals_cache<G, 26>::key_t key = {
        uint64_t(p.x.ptr), uint64_t(p.z.ptr), uint64_t(p.B.ptr), uint64_t(p.C.ptr), uint64_t(p.out.ptr),
        uint64_t(p.workspace), uint64_t(p.seq_idx != nullptr), uint64_t(p.batch), uint64_t(p.len),
        uint64_t(p.heads), uint64_t(p.groups),
        uint64_t(p.x.stride_b), uint64_t(p.x.stride_h), uint64_t(p.x.stride_n),
        uint64_t(p.z.stride_b), uint64_t(p.z.stride_h), uint64_t(p.z.stride_n),
        uint64_t(p.B.stride_b), uint64_t(p.B.stride_h), uint64_t(p.B.stride_n),
        uint64_t(p.C.stride_b), uint64_t(p.C.stride_h), uint64_t(p.C.stride_n),
        uint64_t(p.out.stride_b), uint64_t(p.out.stride_h), uint64_t(p.out.stride_n)};
    G g = cache.get(key, [&] {
        // Without a gate the z map is built on x and never used.
        const tensor4 z = p.z.ptr ? p.z : p.x;
        const stage_maps<K> m = stage_maps_of<K>(p, w, p.workspace);
        const int task_heads = p.heads / K::HEADS_PER_TASK;
        return G{heads_map<K>(p.x, p), heads_map<K>(z, p),
                 heads_map<K>(p.out.ptr, p.out.stride_b, p.out.stride_h, p.out.stride_n, p), m.B, m.C, m.dt, m.cum,
                 m.seq, nullptr, nullptr, nullptr, 0, p.heads, p.heads / p.groups, w.chunks, p.batch * task_heads,
                 0, 0, task_heads};
    });
    // Fields that no map encodes are set per call.
    g.D = p.D;
    g.D_per_channel = p.D_per_channel ? 1 : 0;
    g.initial_states = p.initial_states;
    g.final_states = p.final_states;
    g.has_z = p.z.ptr ? 1 : 0;
    g.has_seq = p.seq_idx ? 1 : 0;
    return kittens::lcsf::launch<K>(g, g.num_tasks, stream);
}

template <int P, int N, scan_config CFG> cudaError_t forward_for(const fwd_problem &p, cudaStream_t stream) {
    if (p.type == dtype::bf16) return launch_forward<mamba2_fwd<kittens::bf16, P, N, CFG>>(p, stream);
    return launch_forward<mamba2_fwd<kittens::half, P, N, CFG>>(p, stream);
}

} // namespace tk_mamba2
