// The fp8 GEMM configuration against variants of it, in one process: L2 hints, the task walk's band height (SUPER_M)
// and two write phases. Each variant's output is compared with the shipped one's bit for bit (the same wgmmas in the
// same order per tile), and timed in the order A B .. B A twice: back to back on one input set (warm), and one call
// at a time after a spin kernel over input sets that span three times the L2 (cold, as `python -m tk_ops.bench` times).
//
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -diag-suppress=20012 \
//        -Iinclude/kittens -Ikernels -Ikernels/gemm -o /tmp/gemm_fp8_ab tools/gemm_fp8_ab.cu
//   /tmp/gemm_fp8_ab MxNxK ...          (on a GPU machine; default 8192x8192x8192)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gemm_launch.cuh"
#include "timeline.cuh"

using namespace tk_gemm;
using kittens::bf16;
using kittens::fp8e4m3;

namespace {

// gemm<fp8e4m3, bf16, k, k, BN, STAGES, C_PIECE, L2_HINTS, CONSUMERS, SUPER_M, BIAS, SPLIT_K, PHASES>
template <bool HINTS, int SUPER_M, int PHASES>
using fp8_gemm = gemm<fp8e4m3, bf16, major::k, major::k, 256, 4, 64, HINTS, 2, SUPER_M, false, false, PHASES>;

template <typename G> cudaError_t run(const fp8e4m3 *a, const fp8e4m3 *b, bf16 *c, int M, int N, int K) {
    return launch_gemm<G>(a, b, c, M, N, K, nullptr, nullptr, 0);
}

void compare(int M, int N, int K, const std::vector<const fp8e4m3 *> &as, const std::vector<const fp8e4m3 *> &bs, bf16 *c) {
    struct variant {
        const char *name;
        cudaError_t (*fn)(const fp8e4m3 *, const fp8e4m3 *, bf16 *, int, int, int);
    };
    const variant variants[] = {
        {"shipped", run<fp8_gemm<false, 16, 1>>},
        {"hints", run<fp8_gemm<true, 16, 1>>},
        {"super 8", run<fp8_gemm<false, 8, 1>>},
        {"super 32", run<fp8_gemm<false, 32, 1>>},
        {"2 phases", run<fp8_gemm<false, 16, 2>>},
        {"hints 2 phases", run<fp8_gemm<true, 16, 2>>},
    };
    constexpr int V = sizeof(variants) / sizeof(variants[0]);
    const int sets = int(as.size());
    const size_t out = size_t(M) * N;
    std::vector<uint16_t> want(out), got(out);
    for (int v = 0; v < V; v++) {
        cudaMemset(c, 0xff, out * 2);
        variants[v].fn(as[0], bs[0], c, M, N, K);
        cudaMemcpy(v ? got.data() : want.data(), c, out * 2, cudaMemcpyDeviceToHost);
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
            std::printf("%s: CUDA error %s\n", variants[v].name, cudaGetErrorString(e));
            std::exit(1);
        }
        size_t bad = 0;
        if (v)
            for (size_t i = 0; i < out; i++) bad += got[i] != want[i];
        if (bad) std::printf("  %s %dx%dx%d: %zu of %zu outputs differ from shipped\n", variants[v].name, M, N, K, bad, out);
    }
    float warm[V] = {}, cold[V] = {};
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < V; i++) {
            const int v = round ? V - 1 - i : i;
            warm[v] += 0.5f * timeline::time_us([&] { variants[v].fn(as[0], bs[0], c, M, N, K); }, 30);
            cold[v] += 0.5f * timeline::cold_us([&](int j) { variants[v].fn(as[j % sets], bs[j % sets], c, M, N, K); }, 30);
        }
    const double flop = 2.0 * M * N * K;
    for (int t = 0; t < 2; t++) {
        std::printf("%5dx%5dx%-5d %s", M, N, K, t ? "cold" : "warm");
        for (int v = 0; v < V; v++) {
            const float us = t ? cold[v] : warm[v], base = t ? cold[0] : warm[0];
            std::printf("  %s %.0f TFLOP/s (%.3f)", variants[v].name, flop / us * 1e-6, us / base);
        }
        std::printf("\n");
    }
}

} // namespace

int main(int argc, char **argv) {
    std::vector<const char *> sizes(argv + 1, argv + argc);
    if (sizes.empty()) sizes = {"8192x8192x8192"};
    for (const char *s : sizes) {
        int M, N, K;
        if (std::sscanf(s, "%dx%dx%d", &M, &N, &K) != 3 || K % 16 || N % 16) {
            std::printf("bad size %s (MxNxK, K and N multiples of 16)\n", s);
            return 1;
        }
        const timeline::operand_sets<fp8e4m3> sets(M, N, K);
        bf16 *c;
        cudaMalloc(&c, size_t(M) * N * 2);
        compare(M, N, K, sets.a, sets.b, c);
        cudaFree(c);
    }
    return 0;
}
