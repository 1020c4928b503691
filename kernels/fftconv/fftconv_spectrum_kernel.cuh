// The filter's spectrum kernel (fftconv.h, filter_spectrum): the rfft at fft points of each row of taps, zero-padded, in
// fp32, reading the taps in any layout and float type and writing the fft / 2 + 1 bins (docs/fftconv.md, "The
// spectrum").
//
// A real row x of fft points is the complex sequence z[n] = x[2n] + i x[2n + 1] of M = fft / 2 points; with Z its
// M-point DFT, X[f] = (Z[f] + conj Z[M - f]) / 2 - i e^(-2 pi i f / fft) (Z[f] - conj Z[M - f]) / 2, f = 0 .. M
// (Z[M] = Z[0]). Z comes from radix-R Stockham passes (M = R0 16^b: one pass of radix R0 in 2, 4, 8 or 16, then
// radix 16), which leave it in natural order, ping-ponging between two shared buffers; the first pass reads the taps from
// global memory, and only its first R / 2 inputs exist (the taps fill at most half of the fft points).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fftconv.h"
#include "fftconv_complex.cuh"

namespace tk_fftconv {
namespace spectrum {

constexpr int THREADS = SPECTRUM.threads, POINTS = SPECTRUM.points; // complex points of a buffer: M of the largest fft

__device__ inline float tap_value(float x) { return x; }
__device__ inline float tap_value(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float tap_value(__half x) { return __half2float(x); }

__device__ __forceinline__ float2 times_minus_i(float2 a) { return make_float2(a.y, -a.x); }

// Buffer index of point i: its 16-point group's position XORed with the next four bits, so that the passes' strided
// accesses (16 j + q) and the plain ones (j + q s) both spread a half-warp over the banks.
__device__ __forceinline__ int slot(int i) { return i ^ ((i >> 4) & 15); }

// e^(-2 pi i k / N) for the small DFTs (N <= 16), from constants.
template <int N> __device__ __forceinline__ float2 unit_root(int k) {
    constexpr float C[16] = {1.f, 0.923879532511286756f, 0.707106781186547524f, 0.382683432365089772f, 0.f,
                             -0.382683432365089772f, -0.707106781186547524f, -0.923879532511286756f, -1.f,
                             -0.923879532511286756f, -0.707106781186547524f, -0.382683432365089772f, 0.f,
                             0.382683432365089772f, 0.707106781186547524f, 0.923879532511286756f};
    const int i = (k * (16 / N)) % 16;
    return make_float2(C[i], -C[(i + 12) % 16]); // sin(x) = cos(x - pi / 2)
}

// The N-point DFT (e^(-2 pi i j k / N)) of v in place, N = 1, 2, 4, 8, 16: N = 4 Q as a 4-point DFT over every Q-th
// input, twiddles e^(-2 pi i b c / N), then Q-point DFTs (the index k = Q a + b, the frequency c + 4 d).
template <int N> __device__ __forceinline__ void dft(float2 (&v)[N]) {
    if constexpr (N == 2) {
        const float2 a = v[0], b = v[1];
        v[0] = cadd(a, b);
        v[1] = csub(a, b);
    } else if constexpr (N == 4) {
        const float2 s0 = cadd(v[0], v[2]), d0 = csub(v[0], v[2]), s1 = cadd(v[1], v[3]), d1 = times_minus_i(csub(v[1], v[3]));
        v[0] = cadd(s0, s1);
        v[2] = csub(s0, s1);
        v[1] = cadd(d0, d1);
        v[3] = csub(d0, d1);
    } else if constexpr (N >= 8) {
        constexpr int Q = N / 4;
        float2 y[Q][4];
#pragma unroll
        for (int b = 0; b < Q; b++) {
            float2 g[4] = {v[b], v[Q + b], v[2 * Q + b], v[3 * Q + b]};
            dft<4>(g);
#pragma unroll
            for (int c = 0; c < 4; c++) y[b][c] = b * c ? cmul(g[c], unit_root<N>(b * c)) : g[c];
        }
#pragma unroll
        for (int c = 0; c < 4; c++) {
            float2 g[Q];
#pragma unroll
            for (int b = 0; b < Q; b++) g[b] = y[b][c];
            dft<Q>(g);
#pragma unroll
            for (int d = 0; d < Q; d++) v[c + 4 * d] = g[d];
        }
    }
}

// e^(-2 pi i e / n) for 0 <= e < n by the fast intrinsic, its argument brought into [-pi, pi], where its absolute
// error is under 2^-21 (the fp32 spectrum's tests hold it to 1e-5 of float64's).
__device__ __forceinline__ float2 root_of(int e, int n) {
    const float turns = float(2 * e > n ? e - n : e) / float(n); // in [-1/2, 1/2]
    float s, c;
    __sincosf(-6.28318530717958648f * turns, &s, &c);
    return make_float2(c, s);
}

// w^1 .. w^(R - 1) from w = e^(-2 pi i e / n): powers by squaring and products (at most six factors deep).
template <int R> __device__ __forceinline__ void powers(float2 (&w)[R], int e, int n) {
    w[0] = make_float2(1.f, 0.f);
    if constexpr (R > 1) w[1] = root_of(e, n);
#pragma unroll
    for (int q = 2; q < R; q++) w[q] = q % 2 ? cmul(w[q - 1], w[1]) : cmul(w[q / 2], w[q / 2]);
}

// One Stockham pass of radix R over `count` rows of M points: output (j / NS) NS R + j % NS + q NS of the DFT over q of
// in[j + q M / R] e^(-2 pi i q (j % NS) / (NS R)), for j < M / R. NS = 1 (the first pass): the inputs are the taps.
template <int R, int M, int NS, typename T> __device__ __forceinline__ void pass(const float2 *in, float2 *out, int count,
                                                                               const T *k, const spectrum_problem &p,
                                                                               int64_t row0) {
    constexpr int ITEMS = M / R;
    for (int w = threadIdx.x; w < count * ITEMS; w += THREADS) {
        const int r = w / ITEMS, j = w % ITEMS;
        float2 v[R];
        if constexpr (NS == 1) {
            const int64_t row = row0 + r, h = row / p.blocks, first = row % p.blocks * p.span;
            const T *taps = k + h * p.row_stride;
#pragma unroll
            for (int q = 0; q < R; q++) {
                float x[2] = {0.f, 0.f};
                if (q < R / 2) { // z[n] = 0 for n >= M / 2
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int at = 2 * (j + q * ITEMS) + e;
                        if (at < p.span && first + at < p.taps) x[e] = tap_value(taps[(first + at) * p.tap_stride]);
                    }
                }
                v[q] = make_float2(x[0], x[1]);
            }
        } else {
            float2 tw[R];
            powers<R>(tw, j % NS, NS * R);
#pragma unroll
            for (int q = 0; q < R; q++) v[q] = q ? cmul(in[slot(r * M + j + q * ITEMS)], tw[q]) : in[slot(r * M + j)];
        }
        dft<R>(v);
        const int base = r * M + j / NS * NS * R + j % NS;
#pragma unroll
        for (int q = 0; q < R; q++) out[slot(base + q * NS)] = v[q];
    }
}

// The radix-16 passes from NS on (from -> to, then back), and the rfft's bins from Z in natural order.
template <int M, int NS, typename T> __device__ __forceinline__ void finish(float2 *from, float2 *to, int count,
                                                                          const spectrum_problem &p, int64_t row0) {
    __syncthreads();
    if constexpr (NS < M) {
        pass<16, M, NS, T>(from, to, count, nullptr, p, row0);
        finish<M, NS * 16, T>(to, from, count, p, row0);
    } else {
        for (int w = threadIdx.x; w < count * (M + 1); w += THREADS) {
            const int r = w / (M + 1), f = w % (M + 1);
            const float2 zf = from[slot(r * M + f % M)], zc = from[slot(r * M + (M - f) % M)];
            const float2 even = make_float2(0.5f * (zf.x + zc.x), 0.5f * (zf.y - zc.y));
            const float2 odd = make_float2(0.5f * (zf.x - zc.x), 0.5f * (zf.y + zc.y));
            const float2 root = f < M ? root_of(f, 2 * M) : make_float2(-1.f, 0.f); // e^(-2 pi i f / fft), exact at M
            const float2 t = cmul(root, odd);                                       // X = even - i t
            p.out[(row0 + r) * (M + 1) + f] = make_float2(even.x + t.y, even.y - t.x);
        }
    }
}

// The first pass's radix R0, with M = R0 16^b and R0 in 2, 4, 8 or 16.
__host__ __device__ constexpr int first_radix(int m) {
    while (m % 16 == 0) m /= 16;
    return m == 1 ? 16 : m;
}

template <int M, typename T>
__global__ __launch_bounds__(THREADS, SPECTRUM.blocks_per_sm) void spectrum_kernel(const spectrum_problem p) {
    extern __shared__ float2 buffers[]; // two of POINTS
    constexpr int PER_ROUND = POINTS / M, R0 = first_radix(M);
    const int64_t rows = int64_t(p.heads) * p.blocks;
    const T *k = static_cast<const T *>(p.k);
    for (int64_t row0 = int64_t(blockIdx.x) * PER_ROUND; row0 < rows; row0 += int64_t(gridDim.x) * PER_ROUND) {
        const int count = int(rows - row0 < PER_ROUND ? rows - row0 : PER_ROUND);
        __syncthreads(); // the previous round's last reads are done
        pass<R0, M, 1, T>(nullptr, buffers, count, k, p, row0);
        finish<M, R0, T>(buffers, buffers + POINTS, count, p, row0);
    }
}

} // namespace spectrum
} // namespace tk_fftconv
