// Host side of the Mamba-2 forward: the workspace layout, the dt pass's launch, and the scan's globals (TMA maps included,
// cached) and launch on the persistent grid (forward_for<P, N, HEAD_PAIR>, instantiated in mamba2_fwd.cu).
#pragma once

#include "common/globals_cache.cuh"
#include "mamba2.h"
#include "mamba2_fwd_kernel.cuh"

namespace tk_mamba2 {

// The workspace: dt and cum (b, h, padded_len) fp32, then the sequence ids (b, padded_len), each region 256-byte
// aligned (padded_len is a multiple of 64 floats).
struct workspace_layout {
    int chunks, padded_len;
    size_t vec_elems, seq_offset, bytes;
    explicit workspace_layout(const fwd_problem &p) {
        chunks = (p.len + KERNEL_CHUNK - 1) / KERNEL_CHUNK;
        padded_len = chunks * KERNEL_CHUNK;
        vec_elems = size_t(p.batch) * p.heads * padded_len;
        seq_offset = 2 * vec_elems;
        bytes = (seq_offset + (p.seq_idx ? size_t(p.batch) * padded_len : 0)) * sizeof(float);
    }
};

// The dt pass (mamba2_prepare.cu) into p.workspace.
cudaError_t launch_prepare(const fwd_problem &p, const workspace_layout &w, cudaStream_t stream);

template <typename K> cudaError_t launch_forward(const fwd_problem &p, cudaStream_t stream) {
    using T = typename K::x_gl::T;
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
        auto in = [](const void *x) { return reinterpret_cast<T *>(const_cast<void *>(x)); };
        const int P = p.head_dim, N = p.state_dim;
        typename K::x_gl x(in(p.x.ptr), p.batch, p.heads, p.len, P, p.x.stride_b, p.x.stride_h, p.x.stride_n);
        // Without a gate the z map is built on x and never used.
        const tensor4 zv = p.z.ptr ? p.z : p.x;
        typename K::x_gl z(in(zv.ptr), p.batch, p.heads, p.len, P, zv.stride_b, zv.stride_h, zv.stride_n);
        typename K::x_gl out(static_cast<T *>(p.out.ptr), p.batch, p.heads, p.len, P, p.out.stride_b,
                             p.out.stride_h, p.out.stride_n);
        typename K::bc_gl B(in(p.B.ptr), p.batch, p.groups, p.len, N, p.B.stride_b, p.B.stride_h, p.B.stride_n);
        typename K::bc_gl C(in(p.C.ptr), p.batch, p.groups, p.len, N, p.C.stride_b, p.C.stride_h, p.C.stride_n);
        float *ws = static_cast<float *>(p.workspace);
        typename K::vec_gl dt(ws, p.batch, p.heads, 1, w.padded_len);
        typename K::vec_gl cum(ws + w.vec_elems, p.batch, p.heads, 1, w.padded_len);
        // Without sequence ids the map is built on the dt rows and never used.
        typename K::vec_gl seq(p.seq_idx ? ws + w.seq_offset : ws, p.batch, 1, 1, w.padded_len);
        const int task_heads = p.heads / K::HEADS_PER_TASK;
        return G{x, z, out, B, C, dt, cum, seq, nullptr, nullptr, nullptr, 0, p.heads, p.heads / p.groups,
                 w.chunks, p.batch * task_heads, 0, 0, task_heads};
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

// Head pairs need a whole head's state per consumer (p = 64) and two heads of one group per task.
inline bool use_head_pairs(const fwd_problem &p) { return p.head_dim == 64 && (p.heads / p.groups) % 2 == 0; }

template <int P, int N, bool HEAD_PAIR> cudaError_t forward_for(const fwd_problem &p, cudaStream_t stream) {
    if (p.type == dtype::bf16) return launch_forward<mamba2_fwd<kittens::bf16, P, N, HEAD_PAIR>>(p, stream);
    return launch_forward<mamba2_fwd<kittens::half, P, N, HEAD_PAIR>>(p, stream);
}

} // namespace tk_mamba2
