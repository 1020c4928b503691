// The Mamba-2 decoding step (mamba2.h): one token per (batch, head) sequence folded into the fp32 state in place.
//
// A head's state is head_dim rows of N floats, N / 4 float4s a row. A warp splits into segments of L lanes (L = N / 4
// up to 32), one row per segment, so a float4 lane reads the same columns of B and C for every row it visits: it
// loads them once. A warp takes UNROLL such row sets at a time and loads all their float4s before using any, so that
// each lane keeps several 16-byte loads in flight (the kernel is bound by memory bandwidth, and the state is read and
// written exactly once). A row's output is the sum over its segment, reduced with shuffles inside the segment.
//
// Grid: x = batch * heads, y = tiles of ROWS_PER_BLOCK rows of head_dim. Small tensors (the token, dt, A, D, dt_bias)
// are read through any strides; the state too, by a second instantiation, when it is not 16-byte aligned float4 rows.
#pragma once

#include "common/scalar16.cuh"
#include "mamba2.h"
#include "mamba2_configs.cuh"

#include <cstdint>

namespace tk_mamba2 {

// Layout of a block and its warps for configuration C and state dimension N. (The kernel takes it as a type: nvcc's
// host stubs cannot spell a __global__ template's class-type argument.)
template <step_config C, int N> struct step_shape {
    static constexpr int WARPS = C.warps, UNROLL = C.unroll;
    static constexpr int VECS = N / 4;                    // float4s per row
    static constexpr int LANES = VECS < 32 ? VECS : 32;  // lanes per row
    static constexpr int ROWS = 32 / LANES;              // rows per warp and row set
    static constexpr int PER_LANE = VECS / LANES;        // float4s of a row per lane
    static constexpr int ROWS_PER_BLOCK = WARPS * ROWS * UNROLL;
    static_assert(VECS % LANES == 0 && 32 % LANES == 0, "the state dimension must be a power of two from 16 to 256");
};

// The state of one head, as float4s of a row: aligned rows are read and written whole, any other layout element by
// element (a separate instantiation, so the aligned kernel keeps its 16-byte accesses).
template <bool ALIGNED> struct head_state {
    float *base;
    int64_t stride_p, stride_n;
    // Float4 number `vec` of a row: its elements 4 vec .. 4 vec + 3 (the aligned kind's element stride is 1).
    __device__ float4 load(int row, int vec) const {
        if constexpr (ALIGNED) return reinterpret_cast<const float4 *>(base + row * stride_p)[vec];
        const float *p = base + row * stride_p + 4 * vec * stride_n;
        return make_float4(p[0], p[stride_n], p[2 * stride_n], p[3 * stride_n]);
    }
    __device__ void store(int row, int vec, const float4 &v) const {
        if constexpr (ALIGNED) {
            reinterpret_cast<float4 *>(base + row * stride_p)[vec] = v;
        } else {
            float *p = base + row * stride_p + 4 * vec * stride_n;
            p[0] = v.x, p[stride_n] = v.y, p[2 * stride_n] = v.z, p[3 * stride_n] = v.w;
        }
    }
};

// The step size of head h: bias, then softplus when asked; no clamp (mamba2.h).
template <typename T> __device__ inline float step_size(const step_problem &p, int b, int h) {
    const int64_t at = b * p.dt_stride_b + h * p.dt_stride_h;
    float dt = p.dt_is_float ? static_cast<const float *>(p.dt)[at]
                             : tk_kernels::to_float(static_cast<const T *>(p.dt)[at]);
    if (p.dt_bias) dt += p.dt_bias[h];
    if (p.dt_softplus) dt = dt > SOFTPLUS_THRESHOLD ? dt : log1pf(expf(dt));
    return dt;
}

template <int LANES> __device__ inline float segment_sum(float x) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

__device__ inline float4 update(const float4 &s, float decay, float dtx, const float4 &b) {
    return make_float4(fmaf(decay, s.x, dtx * b.x), fmaf(decay, s.y, dtx * b.y), fmaf(decay, s.z, dtx * b.z),
                       fmaf(decay, s.w, dtx * b.w));
}

__device__ inline float dot(const float4 &a, const float4 &b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

template <typename T, typename S, bool ALIGNED>
__global__ void __launch_bounds__(S::WARPS * 32) mamba2_step_kernel(const step_problem p) {
    using tk_kernels::from_float;
    using tk_kernels::load;
    constexpr int UNROLL = S::UNROLL;
    const int b = blockIdx.x / p.heads, h = blockIdx.x % p.heads;
    const int g = h / (p.heads / p.groups);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int segment = lane / S::LANES, column = lane % S::LANES;

    const float dt = step_size<T>(p, b, h);
    const float decay = expf(dt * p.A[h]);

    // This lane's columns of B and C, the same for every row it visits.
    float4 Bv[S::PER_LANE], Cv[S::PER_LANE];
#pragma unroll
    for (int k = 0; k < S::PER_LANE; k++) {
        const int c = 4 * (column + k * S::LANES);
        Bv[k] = make_float4(load<T>(p.B, b, g, c), load<T>(p.B, b, g, c + 1), load<T>(p.B, b, g, c + 2),
                            load<T>(p.B, b, g, c + 3));
        Cv[k] = make_float4(load<T>(p.C, b, g, c), load<T>(p.C, b, g, c + 1), load<T>(p.C, b, g, c + 2),
                            load<T>(p.C, b, g, c + 3));
    }

    const head_state<ALIGNED> state{p.state + b * p.state_stride[0] + h * p.state_stride[1], p.state_stride[2],
                                    p.state_stride[3]};
    const int first = blockIdx.y * S::ROWS_PER_BLOCK + warp * S::ROWS * UNROLL + segment;

    // Every load of the warp's row sets first, then the arithmetic.
    float4 s[UNROLL][S::PER_LANE];
    float x[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        const int row = first + u * S::ROWS;
        const bool valid = row < p.head_dim;
        x[u] = valid ? load<T>(p.x, b, h, row) : 0.f;
#pragma unroll
        for (int k = 0; k < S::PER_LANE; k++)
            s[u][k] = valid ? state.load(row, column + k * S::LANES) : make_float4(0.f, 0.f, 0.f, 0.f);
    }

    T *const y = static_cast<T *>(p.y) + (int64_t(b) * p.heads + h) * p.head_dim;
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        const int row = first + u * S::ROWS;
        // A row past head_dim (a ragged last tile) is computed on zeros and neither stored nor written out: the whole
        // warp must reach the shuffles.
        const bool valid = row < p.head_dim;
        const float dtx = dt * x[u];
        float acc = 0.f;
#pragma unroll
        for (int k = 0; k < S::PER_LANE; k++) {
            const float4 next = update(s[u][k], decay, dtx, Bv[k]);
            if (valid) state.store(row, column + k * S::LANES, next);
            acc += dot(next, Cv[k]);
        }
        acc = segment_sum<S::LANES>(acc);
        if (valid && column == 0) {
            if (p.D) acc = fmaf(p.D[p.D_per_channel ? h * p.head_dim + row : h], x[u], acc);
            if (p.z.ptr) {
                const float zv = load<T>(p.z, b, h, row);
                acc *= zv / (1.f + expf(-zv));
            }
            y[row] = from_float<T>(acc);
        }
    }
}

} // namespace tk_mamba2
