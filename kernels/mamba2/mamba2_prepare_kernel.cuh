// The dt pass of the Mamba-2 scans (forward and backward): dt as the scans use it (bias, softplus, clamp) and its
// cumulative log-decay cum_t = sum dt A from the start of each chunk of KERNEL_CHUNK tokens, per (batch, head), in fp32
// rows padded to whole chunks (dt = 0 past the end, so a padded token decays nothing and adds nothing), plus the
// sequence ids padded with the last one. dt arrives (b, l, h) with the heads innermost; the scans want each head's
// tokens contiguous for TMA.
#pragma once

#include "kittens.cuh"
#include "mamba2.h"
#include "mamba2_configs.cuh"

namespace tk_mamba2 {
using namespace kittens;

struct prep_args {
    const float *dt, *A, *dt_bias;
    const int *seq_idx;
    float *dt_out, *cum_out; // (b, h, padded_len)
    float *seq_out;          // (b, padded_len): the ids' bits, read by TMA as fp32 words
    int batch, len, heads, padded_len, chunks;
    int softplus;
    float dt_min, dt_max;
};

// Configuration C as the kernel takes it: a type (nvcc's host stubs cannot spell a __global__ template's class-type
// argument).
template <prepare_config C> struct prepare_shape {
    static constexpr int HEADS = C.heads, THREADS = C.threads;
};

// One block per (batch row and chunk, block of S::HEADS heads): the chunk's dt rows are read coalesced into shared
// memory, then each warp scans the chunk of one head at a time (two tokens per lane).
template <typename S>
__global__ void __launch_bounds__(S::THREADS) prepare_dt(const __grid_constant__ prep_args a) {
    __shared__ float tile[KERNEL_CHUNK][S::HEADS + 1];
    const int b = blockIdx.x / a.chunks, chunk = blockIdx.x - b * a.chunks, h0 = blockIdx.y * S::HEADS;
    const int t0 = chunk * KERNEL_CHUNK;
    for (int i = threadIdx.x; i < KERNEL_CHUNK * S::HEADS; i += S::THREADS) {
        const int tok = i / S::HEADS, hh = i % S::HEADS, h = h0 + hh, t = t0 + tok;
        float v = 0.f;
        if (t < a.len && h < a.heads) {
            v = a.dt[(size_t(b) * a.len + t) * a.heads + h];
            if (a.dt_bias) v += a.dt_bias[h];
            if (a.softplus) v = v > SOFTPLUS_THRESHOLD ? v : log1pf(expf(v));
            v = fminf(fmaxf(v, a.dt_min), a.dt_max);
        }
        tile[tok][hh] = v;
    }
    __syncthreads();
    const int warp = threadIdx.x / WARP_THREADS, lane = threadIdx.x % WARP_THREADS;
    for (int hh = warp; hh < S::HEADS; hh += S::THREADS / WARP_THREADS) {
        const int h = h0 + hh;
        if (h >= a.heads) break;
        const float A = a.A[h];
        const float d0 = tile[2 * lane][hh], d1 = tile[2 * lane + 1][hh];
        const float c0 = d0 * A, pair = c0 + d1 * A;
        float incl = pair; // inclusive scan of the lanes' pair sums
#pragma unroll
        for (int o = 1; o < WARP_THREADS; o <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += y;
        }
        const size_t at = (size_t(b) * a.heads + h) * a.padded_len + t0 + 2 * lane;
        *reinterpret_cast<float2 *>(a.dt_out + at) = make_float2(d0, d1);
        *reinterpret_cast<float2 *>(a.cum_out + at) = make_float2(incl - pair + c0, incl);
    }
    if (a.seq_idx && blockIdx.y == 0 && threadIdx.x < KERNEL_CHUNK) {
        const int t = t0 + threadIdx.x;
        // Padding takes the last token's id, so that the chunk's last id is the last valid token's.
        a.seq_out[size_t(b) * a.padded_len + t] = __int_as_float(a.seq_idx[size_t(b) * a.len + min(t, a.len - 1)]);
    }
}

} // namespace tk_mamba2
