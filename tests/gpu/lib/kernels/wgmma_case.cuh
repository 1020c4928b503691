// One wgmma test case: a single warpgroup computes D = op(A) @ op(B) (+ C) for one tile of each
// operand, read from plain row-major global buffers with ordinary loads (so only the wgmma layer
// is under test, not TMA), and writes D back through the documented accumulator layout.
//
// Stored operand shapes, all row-major:  A: (M, K), or (K, M) for the At forms
//                                       B: (K, N) for AB / AtB, (N, K) for ABt / AtBt
// `mode`: 0 mm (D = AB, C is loaded into the accumulator and must be ignored), 1 mma (D = C + AB),
// 2 mm then mma chained with no wait between (D = 2 AB).
#pragma once

#include "harness.cuh"

namespace wgmma_test {

using namespace kittens;

enum form_t { AB = 0, ABt = 1, AtB = 2, AtBt = 3 };
constexpr const char *form_name(int f) { return f == AB ? "AB" : f == ABt ? "ABt" : f == AtB ? "AtB" : "AtBt"; }

// Row and column (inside this warp's 16*H x cols block) of register pair p of base tile (h, j),
// element q, per rt_layout.cuh: pairs run along a row; data[1] / data[3] are 8 rows down,
// data[2] / data[3] are 8 columns right.
__device__ inline int frag_row(int h, int p) { return 16 * h + laneid() / 4 + 8 * (p & 1); }
__device__ inline int frag_col(int j, int p, int q) { return 16 * j + 2 * (laneid() % 4) + 8 * (p >> 1) + q; }

// Element (r, c) of the warpgroup-wide matrix held by warp w at slab h = rows 64h + 16w + ...
template <typename RT, typename F> __device__ inline void for_each_fragment(RT &t, F &&f) {
    const int w = warpid() % 4;
#pragma unroll
    for (int h = 0; h < RT::height; h++)
#pragma unroll
        for (int j = 0; j < RT::width; j++)
#pragma unroll
            for (int p = 0; p < 4; p++)
#pragma unroll
                for (int q = 0; q < 2; q++) {
                    auto *pair = reinterpret_cast<typename RT::T *>(&t.tiles[h][j].data[p]);
                    f(pair[q], 64 * h + 16 * w + frag_row(0, p), frag_col(j, p, q));
                }
}

template <typename TA, typename TB, int H, int N, int K, int form, bool a_regs> struct wgmma_case {
    static constexpr bool trans_a = form == AtB || form == AtBt;
    static constexpr bool b_n_major = form == AB || form == AtB;
    static constexpr int M = 64 * H;
    using A_st = std::conditional_t<trans_a, st<TA, K, M>, st<TA, M, K>>;
    using B_st = std::conditional_t<b_n_major, st<TB, K, N>, st<TB, N, K>>;
    using A_rt = rt<TA, 16 * H, K, row_l>;
    using D_rt = rt_fl<16 * H, N>;
    static constexpr int smem = shared_bytes_for<A_st, B_st>();

    template <typename D, typename A, typename B> __device__ static void product(D &d, const A &a, const B &b, bool acc) {
        if constexpr (form == AB) { if (acc) warpgroup::mma_AB(d, a, b); else warpgroup::mm_AB(d, a, b); }
        if constexpr (form == ABt) { if (acc) warpgroup::mma_ABt(d, a, b); else warpgroup::mm_ABt(d, a, b); }
        if constexpr (form == AtB) { if (acc) warpgroup::mma_AtB(d, a, b); else warpgroup::mm_AtB(d, a, b); }
        if constexpr (form == AtBt) { if (acc) warpgroup::mma_AtBt(d, a, b); else warpgroup::mm_AtBt(d, a, b); }
    }

    __device__ static void body(const TA *ga, const TB *gb, const float *gc, float *gd, int mode) {
        extern __shared__ alignment_dummy shm[];
        shared_allocator al(shm);
        A_st &sa = al.allocate<A_st>();
        B_st &sb = al.allocate<B_st>();
        for (int i = threadIdx.x; i < B_st::num_elements; i += blockDim.x) sb(i / B_st::cols, i % B_st::cols) = gb[i];
        if constexpr (!a_regs)
            for (int i = threadIdx.x; i < A_st::num_elements; i += blockDim.x) sa(i / A_st::cols, i % A_st::cols) = ga[i];
        async_proxy_fence(); // wgmma reads shared memory through the async proxy
        __syncthreads();

        D_rt d;
        for_each_fragment(d, [&](float &x, int r, int c) { x = gc[r * N + c]; });
        auto run = [&](const auto &a) {
            if (mode == 2) {
                product(d, a, sb, false);
                product(d, a, sb, true);
            } else {
                product(d, a, sb, mode == 1);
            }
            warpgroup::mma_async_wait(d);
        };
        if constexpr (a_regs) {
            A_rt ar;
            for_each_fragment(ar, [&](TA &x, int r, int c) { x = ga[r * K + c]; });
            run(ar);
        } else {
            run(sa);
        }
        for_each_fragment(d, [&](float &x, int r, int c) { gd[r * N + c] = x; });
    }
};

template <typename Case>
__global__ void kernel(const typename Case::A_st::T *a, const typename Case::B_st::T *b, const float *c, float *d, int mode) {
    Case::body(a, b, c, d, mode);
}

// buffers: A, B, C, D; args: mode
template <typename Case> int run(void **bufs, const long long *args) {
    if (int e = tk_test::launch_status(kernel<Case>, Case::smem)) return e;
    kernel<Case><<<1, WARPGROUP_THREADS, Case::smem>>>(static_cast<const typename Case::A_st::T *>(bufs[0]),
                                                          static_cast<const typename Case::B_st::T *>(bufs[1]),
                                                          static_cast<const float *>(bufs[2]), static_cast<float *>(bufs[3]),
                                                          int(args[0]));
    return 0;
}

template <typename T> std::string type_tag() { return tk_test::dtype_name<T>(); }

// Registers "wgmma/<form>/<dtype>/<smem|regs>/H<h>/N<n>/K<k>" (dtype "<a>x<b>" for mixed fp8).
template <typename TA, typename TB, int H, int N, int K, int form, bool a_regs> void add() {
    std::string dt = std::same_as<TA, TB> ? type_tag<TA>() : type_tag<TA>() + "x" + type_tag<TB>();
    tk_test::add(std::string("wgmma/") + form_name(form) + "/" + dt + "/" + (a_regs ? "regs" : "smem") + "/H" +
                     std::to_string(H) + "/N" + std::to_string(N) + "/K" + std::to_string(K),
                 &run<wgmma_case<TA, TB, H, N, K, form, a_regs>>);
}

} // namespace wgmma_test
