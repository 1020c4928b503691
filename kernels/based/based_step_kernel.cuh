// The Based decoding step's kernel (based.h: step_problem). The step reads and writes the fp32 state (value_dim x
// STATE_FEATURES per head) once and does a few FLOPs per element: it is bound by memory bandwidth, so it is a plain
// CUDA kernel with 16-byte accesses, not a tile kernel. One block per (batch, head).
//
// A head's kv is value_dim rows of STATE_FEATURES (273) floats. 273 is odd, so single rows are not 16-byte aligned,
// but groups of four rows are (4 x 273 floats = 273 float4s): the kernel walks kv in such groups, one warp per group,
// every access a float4. Element e of a group is feature e % 273 of row e / 273, so phi(k) and phi(scale q) sit in
// shared memory four times over, back to back, and float4 j of a group finds its four features in float4 j of those
// copies (conflict-free 16-byte shared loads). Three float4s of a group straddle two rows; each element finds its row
// by comparisons (no division, no register array indexed at run time, which would go to local memory).
#pragma once

#include "based.h"
#include "common/scalar16.cuh"

#include <cstdint>

namespace tk_based {

namespace step_kernel {

constexpr int F = STATE_FEATURES;
constexpr int GROUP_ROWS = 4;
constexpr int GROUP_VECS = F; // float4s in a group of four rows
constexpr int MAX_WARPS = 8;
constexpr int VECS_PER_LANE = (GROUP_VECS + 31) / 32;

using tk_kernels::from_float;
using tk_kernels::load;
using tk_kernels::to_float;

// Feature f of phi(x): 1, then x_a, then x_a x_b / sqrt(2) with (a, b) row-major.
__device__ inline float feature(const float *x, int f) {
    if (f == 0) return 1.f;
    if (f <= FEATURE_DIM) return x[f - 1];
    const int ab = f - 1 - FEATURE_DIM;
    return x[ab / FEATURE_DIM] * x[ab % FEATURE_DIM] * 0.70710678118654752f;
}

// A state tensor that is a view at an odd offset (a slice of a larger cache) is read and written element by element,
// by a kernel of its own: a run-time branch per access made the compiler split the aligned stores too.
template <bool ALIGNED> __device__ inline float4 load4(const float *p) {
    if constexpr (ALIGNED) return *reinterpret_cast<const float4 *>(p);
    else return make_float4(p[0], p[1], p[2], p[3]);
}
template <bool ALIGNED> __device__ inline void store4(float *p, const float4 &x) {
    if constexpr (ALIGNED) {
        *reinterpret_cast<float4 *>(p) = x;
    } else {
        p[0] = x.x, p[1] = x.y, p[2] = x.z, p[3] = x.w;
    }
}

__device__ inline float warp_sum(float x) {
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

// Which of four values belongs to row r (0..3), without indexing registers at run time.
__device__ inline float pick(int r, float a, float b, float c, float d) { return r == 0 ? a : r == 1 ? b : r == 2 ? c : d; }

// Element e (0..4F-1) of a group: kv += v_row phi_k, then the row's output sum gains kv phi_q.
__device__ inline void element(float &kv, float fk, float fq, int e, const float (&v)[GROUP_ROWS],
                               float (&acc)[GROUP_ROWS]) {
    const int r = (e >= F) + (e >= 2 * F) + (e >= 3 * F);
    kv = fmaf(pick(r, v[0], v[1], v[2], v[3]), fk, kv);
    const float c = kv * fq;
#pragma unroll
    for (int t = 0; t < GROUP_ROWS; t++) acc[t] += r == t ? c : 0.f;
}

template <typename T, bool ALIGNED>
__global__ void __launch_bounds__(MAX_WARPS * 32) based_step_kernel(const step_problem p) {
    __shared__ float xq[FEATURE_DIM], xk[FEATURE_DIM];
    __shared__ float4 phi_k[GROUP_VECS], phi_q[GROUP_VECS]; // phi(k) and phi(scale q), each four times over
    __shared__ float v[MAX_VALUE_DIM];
    __shared__ float den_parts[MAX_WARPS];

    const int b = blockIdx.x / p.heads, h = blockIdx.x % p.heads;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
    if (tid < FEATURE_DIM) {
        xq[tid] = p.scale * load<T>(p.q, b, h, tid);
    } else if (tid < 2 * FEATURE_DIM) {
        xk[tid - FEATURE_DIM] = load<T>(p.k, b, h, tid - FEATURE_DIM);
    }
    for (int d = tid; d < p.value_dim; d += blockDim.x) v[d] = load<T>(p.v, b, h, d);
    __syncthreads();

    // The features, k_sum += phi(k), and den = k_sum . phi(scale q) with the token already in k_sum.
    float *const k_sum = p.k_sum + int64_t(blockIdx.x) * F;
    float *const fk_all = reinterpret_cast<float *>(phi_k), *const fq_all = reinterpret_cast<float *>(phi_q);
    float den = 0.f;
    for (int f = tid; f < F; f += blockDim.x) {
        const float fk = feature(xk, f), fq = feature(xq, f);
        const float s = k_sum[f] + fk;
        k_sum[f] = s;
        den = fmaf(s, fq, den);
#pragma unroll
        for (int r = 0; r < GROUP_ROWS; r++) {
            fk_all[f + r * F] = fk;
            fq_all[f + r * F] = fq;
        }
    }
    den = warp_sum(den);
    if (lane == 0) den_parts[warp] = den;
    __syncthreads();
    den = 0.f;
    for (int w = 0; w < warps; w++) den += den_parts[w];

    // kv += v phi(k)^T and o = kv phi(scale q), four rows per warp at a time. Each lane loads all its float4s of the
    // group before using any, so that a warp keeps several 16-byte loads in flight.
    float *const kv = p.kv + int64_t(blockIdx.x) * p.value_dim * F;
    T *const o = static_cast<T *>(p.o) + int64_t(blockIdx.x) * p.value_dim;
    for (int g = warp; g < p.value_dim / GROUP_ROWS; g += warps) {
        float *const rows = kv + int64_t(g) * GROUP_ROWS * F;
        const float vg[GROUP_ROWS] = {v[4 * g], v[4 * g + 1], v[4 * g + 2], v[4 * g + 3]};
        float4 x[VECS_PER_LANE];
#pragma unroll
        for (int i = 0; i < VECS_PER_LANE; i++) {
            const int j = lane + 32 * i;
            if (j < GROUP_VECS) x[i] = load4<ALIGNED>(rows + 4 * j);
        }
        float acc[GROUP_ROWS] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = 0; i < VECS_PER_LANE; i++) {
            const int j = lane + 32 * i;
            if (j >= GROUP_VECS) continue;
            const float4 fk = phi_k[j], fq = phi_q[j];
            element(x[i].x, fk.x, fq.x, 4 * j, vg, acc);
            element(x[i].y, fk.y, fq.y, 4 * j + 1, vg, acc);
            element(x[i].z, fk.z, fq.z, 4 * j + 2, vg, acc);
            element(x[i].w, fk.w, fq.w, 4 * j + 3, vg, acc);
            store4<ALIGNED>(rows + 4 * j, x[i]);
        }
#pragma unroll
        for (int t = 0; t < GROUP_ROWS; t++) acc[t] = warp_sum(acc[t]);
        if (lane < GROUP_ROWS) {
            const float num = pick(lane, acc[0], acc[1], acc[2], acc[3]);
            o[4 * g + lane] = from_float<T>(p.normalize ? num / (den + p.eps) : num);
        }
    }
}

} // namespace step_kernel

} // namespace tk_based
