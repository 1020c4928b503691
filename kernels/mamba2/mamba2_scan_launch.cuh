// What the host sides of the Mamba-2 scans share (the forward's, mamba2_fwd_launch.cuh, and the backward's,
// mamba2_bwd_launch.cuh): the workspace the dt pass fills, that pass's launch (mamba2_prepare.cu), and the TMA maps of
// the operands every scan kernel reads.
#pragma once

#include "mamba2.h"

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

// The dt pass (mamba2_prepare_kernel.cuh) into p.workspace.
cudaError_t launch_prepare(const fwd_problem &p, const workspace_layout &w, cudaStream_t stream);

// A (b, l, h, p) tensor of the problem as scan kernel K's (b, h, l, p) map.
template <typename K>
typename K::x_gl heads_map(const void *ptr, int64_t stride_b, int64_t stride_h, int64_t stride_n,
                           const fwd_problem &p) {
    using T = typename K::x_gl::T;
    return typename K::x_gl(static_cast<T *>(const_cast<void *>(ptr)), p.batch, p.heads, p.len, p.head_dim, stride_b,
                            stride_h, stride_n);
}
template <typename K> typename K::x_gl heads_map(const tensor4 &t, const fwd_problem &p) {
    return heads_map<K>(t.ptr, t.stride_b, t.stride_h, t.stride_n, p);
}

// The maps of every chunk's stage but the (b, h, l, p) tensors: B and C (b, g, l, n), and in the workspace the
// prepared dt and cum (b, h, 1, padded_len) and the ids (b, 1, 1, padded_len; without ids the map is built on the dt
// rows and never used).
template <typename K> struct stage_maps {
    typename K::bc_gl B, C;
    typename K::vec_gl dt, cum, seq;
};
template <typename K> stage_maps<K> stage_maps_of(const fwd_problem &p, const workspace_layout &w, void *workspace) {
    using T = typename K::x_gl::T;
    auto in = [](const void *x) { return static_cast<T *>(const_cast<void *>(x)); };
    const int N = p.state_dim;
    float *ws = static_cast<float *>(workspace);
    return {{in(p.B.ptr), p.batch, p.groups, p.len, N, p.B.stride_b, p.B.stride_h, p.B.stride_n},
            {in(p.C.ptr), p.batch, p.groups, p.len, N, p.C.stride_b, p.C.stride_h, p.C.stride_n},
            {ws, p.batch, p.heads, 1, w.padded_len},
            {ws + w.vec_elems, p.batch, p.heads, 1, w.padded_len},
            {p.seq_idx ? ws + w.seq_offset : ws, p.batch, 1, 1, w.padded_len}};
}

} // namespace tk_mamba2
