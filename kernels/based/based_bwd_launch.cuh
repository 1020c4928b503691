// Host side of the Based backward: the scratch it needs, the globals (TMA maps included) of the chunked passes, and
// the launches of the preparation, the two passes (chunked, or quadratic for short sequences: based_configs.cuh
// decides) and (chunked passes with value splits) the conversion of dq and dk.
#pragma once

#include "based.h"
#include "based_bwd_convert_kernel.cuh"
#include "based_bwd_dkv_kernel.cuh"
#include "based_bwd_dq_kernel.cuh"
#include "based_bwd_prep_kernel.cuh"
#include "based_configs.cuh"
#include "based_maps_launch.cuh"

#include <cstddef>

namespace tk_based {

// The backward's fp32 scratch, carved from one buffer: rinv and dD per row, (batch, heads, padded_len) each, and,
// when the value columns are split over two tasks, the dq and dk accumulators, (batch, heads, padded_len, 16) each.
struct bwd_scratch {
    int chunks, padded_len;
    bool split;
    size_t row_floats, acc_floats; // of one buffer of each kind
    size_t bytes() const { return (2 * row_floats + 2 * acc_floats) * sizeof(float); }
};

inline bwd_scratch bwd_scratch_of(const bwd_problem &p) {
    bwd_scratch s{};
    s.chunks = (p.len + BWD_CHUNK - 1) / BWD_CHUNK;
    s.padded_len = s.chunks * BWD_CHUNK;
    s.split = backward_splits_values(p.value_dim) && !takes_quadratic(p); // the quadratic passes take all of Dv
    s.row_floats = size_t(p.batch) * p.heads * s.padded_len;
    s.acc_floats = s.split ? s.row_floats * FEATURE_DIM : 0;
    return s;
}

// Both passes for one (dtype, value columns per task, split) configuration; `scratch` holds rinv and dD already.
template <typename T, int VT, bool SPLIT>
cudaError_t launch_backward_passes(const bwd_problem &p, const bwd_scratch &s, float *scratch, cudaStream_t stream) {
    using B = based_bwd<T, VT, SPLIT>;
    using G = typename B::globals;
    using grad_gl = typename B::grad_gl;
    float *rinv = scratch, *dd = scratch + s.row_floats;
    float *dq_acc = scratch + 2 * s.row_floats, *dk_acc = dq_acc + s.acc_floats;
    const auto q = input_map<typename B::qk_gl>(p.q, p.batch, p.heads, p.len, B::DK);
    const auto k = input_map<typename B::qk_gl>(p.k, p.batch, p.heads, p.len, B::DK);
    const auto v = input_map<typename B::v_gl>(p.v, p.batch, p.heads, p.len, p.value_dim);
    const auto dout = input_map<typename B::v_gl>(p.d_o, p.batch, p.heads, p.len, p.value_dim);
    const auto dv = output_map<typename B::v_gl>(p.dv.ptr, p.batch, p.heads, p.len, p.value_dim, p.dv.stride_b,
                                                 p.dv.stride_h, p.dv.stride_n);
    const int64_t head_rows = s.padded_len;
    const auto rows = [&](float *x) {
        return output_map<typename B::row_gl>(x, 1, p.batch, p.heads, s.padded_len, p.batch * p.heads * head_rows,
                                              p.heads * head_rows, head_rows);
    };
    const auto grad = [&](const out4 &out, float *acc) {
        if constexpr (SPLIT)
            return output_map<grad_gl>(acc, p.batch, p.heads, s.padded_len, B::DK, p.heads * head_rows * B::DK,
                                       head_rows * B::DK, B::DK);
        else return output_map<grad_gl>(out.ptr, p.batch, p.heads, p.len, B::DK, out.stride_b, out.stride_h, out.stride_n);
    };
    const int splits = SPLIT ? 2 : 1, tasks = p.batch * p.heads * splits;
    const G dq_globals{q, k, v, dout, rows(rinv), rows(dd), grad(p.dq, dq_acc), dv, p.kv0, p.k_sum0, nullptr, nullptr,
                       p.heads, splits, p.len, s.chunks, p.value_dim, tasks, p.scale};
    G dkv_globals = dq_globals;
    dkv_globals.grad = grad(p.dk, dk_acc);
    dkv_globals.state0 = p.d_kv_final;
    dkv_globals.sum0 = p.d_k_sum_final;
    dkv_globals.d_kv0 = p.d_kv0;
    dkv_globals.d_k_sum0 = p.d_k_sum0;
    if (cudaError_t e = kittens::lcsf::launch<typename B::dq_pass>(dq_globals, tasks, stream); e != cudaSuccess) return e;
    return kittens::lcsf::launch<typename B::dkv_pass>(dkv_globals, tasks, stream);
}

// The whole backward in one dtype, given the scratch.
template <typename T> cudaError_t launch_backward(const bwd_problem &p, const bwd_scratch &s, float *scratch, cudaStream_t stream) {
    float *rinv = scratch, *dd = scratch + s.row_floats;
    {
        row_prep_args<T> a{static_cast<const T *>(p.o.ptr), static_cast<const T *>(p.d_o.ptr), p.o.stride_b, p.o.stride_h,
                           p.o.stride_n, p.d_o.stride_b, p.d_o.stride_h, p.d_o.stride_n, p.den, rinv, dd, p.heads, p.len,
                           s.padded_len, p.value_dim, int64_t(s.row_floats), p.eps, p.normalize};
        constexpr int THREADS = 256, ROWS_PER_BLOCK = THREADS / BWD_ROW_LANES;
        const unsigned blocks = unsigned((s.row_floats + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
        based_bwd_rows<T><<<blocks, THREADS, 0, stream>>>(a);
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    }
    if (takes_quadratic(p)) return quadratic_backward(p, rinv, dd, s.padded_len, stream);
    cudaError_t e;
    if (!s.split) {
        switch (backward_value_block(p.value_dim)) {
        case 16: e = launch_backward_passes<T, 16, false>(p, s, scratch, stream); break;
        case 32: e = launch_backward_passes<T, 32, false>(p, s, scratch, stream); break;
        case 48: e = launch_backward_passes<T, 48, false>(p, s, scratch, stream); break;
        default: e = launch_backward_passes<T, 64, false>(p, s, scratch, stream); break;
        }
    } else {
        e = launch_backward_passes<T, CHUNKED_MAX_VALUE_COLUMNS, true>(p, s, scratch, stream);
    }
    if (e != cudaSuccess || !s.split) return e;
    float *acc = scratch + 2 * s.row_floats;
    const out4 outs[2] = {p.dq, p.dk};
    for (int i = 0; i < 2; i++) {
        grad_convert_args<T> a{acc + i * s.acc_floats, static_cast<T *>(outs[i].ptr), outs[i].stride_b, outs[i].stride_h,
                               outs[i].stride_n, p.heads, p.len, s.padded_len, int64_t(p.batch) * p.heads * p.len * 2};
        constexpr int THREADS = 256;
        based_bwd_convert<T><<<unsigned((a.items + THREADS - 1) / THREADS), THREADS, 0, stream>>>(a);
        if (cudaError_t e2 = cudaGetLastError(); e2 != cudaSuccess) return e2;
    }
    return cudaSuccess;
}

} // namespace tk_based
