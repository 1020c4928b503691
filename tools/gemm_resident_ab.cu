// Short-K GEMM configurations side by side in one process: the hinted blocks (K <= 512) against the resident-B
// configuration that serves K <= 256 (RESIDENT_B: the block column's B panel stays in shared memory) and two of its
// variants, on random inputs, both B layouts. Each variant's output is compared with hinted's bit for bit (the same wgmmas in the same order), and
// timed in the order A B .. B A twice: back to back on one input set (warm), and one call at a time after a spin
// kernel, rotating input sets that span three times the L2 (cold, as `python -m tk_ops.bench` times).
//
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -diag-suppress=20012 \
//        -Iinclude/kittens -Ikernels -Ikernels/gemm -o /tmp/gemm_resident_ab tools/gemm_resident_ab.cu
//   /tmp/gemm_resident_ab MxNxK ...          (on a GPU machine; default 4096x4096x256 8192x8192x256)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gemm_launch.cuh"
#include "timeline.cuh"

using namespace tk_gemm;
using kittens::bf16;

namespace {

template <major BMJ> using hinted = gemm<bf16, bf16, major::k, BMJ, 256, 4, 64, true, 2, 16, false, false, 2>;
// RESIDENT_B with STAGES A-only ring stages and BUFFERS epilogue pieces per warp (224 KB each).
template <major BMJ, int STAGES, int BUFFERS, int PHASES = 1>
using resident = gemm<bf16, bf16, major::k, BMJ, 256, STAGES, 64, true, 2, 16, false, false, PHASES, true, BUFFERS>;

template <typename G> cudaError_t run(const bf16 *a, const bf16 *b, bf16 *c, int M, int N, int K) {
    return launch_gemm<G>(a, b, c, M, N, K, nullptr, nullptr, 0);
}

// sets: input sets (a, b) of this size; the warm times use the first back to back, the cold ones rotate through all of
// them with a spin kernel before each call, as the Python bench does.
template <major BMJ> void compare(const char *layout, int M, int N, int K, const std::vector<const bf16 *> &as,
                                  const std::vector<const bf16 *> &bs, bf16 *c) {
    const bf16 *a = as[0], *b = bs[0];
    const int sets = int(as.size());
    const size_t out = size_t(M) * N;
    std::vector<uint16_t> want(out), got(out);
    cudaMemset(c, 0xff, out * 2);
    run<hinted<BMJ>>(a, b, c, M, N, K);
    cudaMemcpy(want.data(), c, out * 2, cudaMemcpyDeviceToHost);
    struct variant {
        const char *name;
        cudaError_t (*fn)(const bf16 *, const bf16 *, bf16 *, int, int, int);
    };
    const variant variants[] = {
        {"hinted", run<hinted<BMJ>>},
        {"resident", run<resident<BMJ, 4, 2>>},
        {"2 phases", run<resident<BMJ, 4, 2, 2>>},
        {"whole tile staged", run<resident<BMJ, 2, 4>>},
    };
    constexpr int V = sizeof(variants) / sizeof(variants[0]);
    for (int v = 1; v < V; v++) {
        cudaMemset(c, 0xff, out * 2);
        variants[v].fn(a, b, c, M, N, K);
        cudaMemcpy(got.data(), c, out * 2, cudaMemcpyDeviceToHost);
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
            std::printf("%s: CUDA error %s\n", variants[v].name, cudaGetErrorString(e));
            std::exit(1);
        }
        size_t bad = 0;
        for (size_t i = 0; i < out; i++) bad += got[i] != want[i];
        if (bad) std::printf("  %s %dx%dx%d %s: %zu of %zu outputs differ from hinted\n", variants[v].name, M, N, K, layout, bad, out);
    }
    float us[V] = {}, cold[V] = {};
    for (int half = 0; half < 2; half++)
        for (int i = 0; i < V; i++) {
            const int v = half ? V - 1 - i : i;
            us[v] += 0.5f * timeline::time_us([&] { variants[v].fn(a, b, c, M, N, K); }, 100);
            cold[v] += 0.5f * timeline::cold_us([&](int j) { variants[v].fn(as[j % sets], bs[j % sets], c, M, N, K); }, 60);
        }
    std::printf("%5dx%5dx%-5d %-6s warm", M, N, K, layout);
    for (int v = 0; v < V; v++) std::printf("  %s %6.2f us (%.3f)", variants[v].name, us[v], us[v] / us[0]);
    std::printf("\n%5dx%5dx%-5d %-6s cold", M, N, K, layout);
    for (int v = 0; v < V; v++) std::printf("  %s %6.2f us (%.3f)", variants[v].name, cold[v], cold[v] / cold[0]);
    std::printf("\n");
}

} // namespace

int main(int argc, char **argv) {
    std::vector<const char *> sizes(argv + 1, argv + argc);
    if (sizes.empty()) sizes = {"4096x4096x256", "8192x8192x256"};
    for (const char *s : sizes) {
        int M, N, K;
        if (std::sscanf(s, "%dx%dx%d", &M, &N, &K) != 3 || K > 256) {
            std::printf("bad size %s (MxNxK, K <= 256)\n", s);
            return 1;
        }
        const timeline::operand_sets<bf16> sets(M, N, K);
        bf16 *c;
        cudaMalloc(&c, size_t(M) * N * 2);
        compare<major::k>("b_t", M, N, K, sets.a, sets.b, c);
        compare<major::mn>("b_row", M, N, K, sets.a, sets.b, c);
        cudaFree(c);
    }
    return 0;
}
