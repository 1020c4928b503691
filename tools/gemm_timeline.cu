// Where a GEMM task's time goes: the hinted bf16 configuration (both operands K-major; with -DTIMELINE_RESIDENT the
// resident-B one, K <= 256) wrapped so that every
// LCSF hook stamps clock64 (first lane of each consumer warpgroup, and the producer's loads), then one launch's
// stamps printed per task for two blocks, with averages over all blocks.
//
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -diag-suppress=20012 \
//        -Iinclude/kittens -Ikernels -Ikernels/gemm -o /tmp/gemm_timeline tools/gemm_timeline.cu
//   /tmp/gemm_timeline K [M=N]          (on a GPU machine; defaults 256 and 4096)
//
// Cycle counts are per SM (clock64). The stamps slow the kernel by ~10%: read them as a breakdown, and time
// changes with the unstamped kernel (also printed).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gemm_launch.cuh"
#include "timeline.cuh"

using namespace tk_gemm;
using kittens::bf16;

namespace {

constexpr int MAX_TASKS = 16, EVENTS = 24, ROLES = 3; // roles: consumer 0, consumer 1, producer
enum event { setup_in, store_in, store_out, drain_out, finish_out, compute_in = 8, compute_out = 16 };
constexpr int MAX_STAGES = 8; // stages stamped per task

__device__ unsigned long long *g_stamps;

__device__ __forceinline__ void stamp(int role, int task, int ev) {
    if (task < MAX_TASKS && threadIdx.x % kittens::WARPGROUP_THREADS == 0)
        g_stamps[((blockIdx.x * ROLES + role) * MAX_TASKS + task) * EVENTS + ev] = timeline::now();
}

#ifdef TIMELINE_RESIDENT
using timed = gemm<bf16, bf16, major::k, major::k, 256, 4, 64, true, 2, 16, false, false, 1, true, 2>;
#else
using timed = gemm<bf16, bf16, major::k, major::k, 256, 4, 64, true, 2, 16>;
#endif

// The kernel K with stamps around its hooks.
template <typename K> struct stamped : timeline::wrapped<stamped<K>, K> {
    using base = timeline::wrapped<stamped<K>, K>;
    using args = typename base::args;
    using base::as_k;

    __device__ static void load(typename base::producer &p) {
        // This block's task number, from the task's position in get_task's order.
#ifdef TIMELINE_RESIDENT
        const int run = (p.g.tiles_m * p.g.tiles_n + gridDim.x - 1) / gridDim.x;
        const int task = p.task.n * p.g.tiles_m + p.task.m - blockIdx.x * run;
#else
        const int band = p.task.m / 16, first_m = band * 16, rows = min(16, p.g.tiles_m - first_m);
        const int id = band * 16 * p.g.tiles_n + p.task.n * rows + (p.task.m - first_m);
        const int task = (id - blockIdx.x) / gridDim.x;
#endif
        if (p.iter < MAX_STAGES && task < MAX_TASKS && threadIdx.x % kittens::WARPGROUP_THREADS == 0)
            g_stamps[((blockIdx.x * ROLES + 2) * MAX_TASKS + task) * EVENTS + compute_in + p.iter] = timeline::now();
        K::load(as_k(p));
    }
    __device__ static void setup(args &c) {
        stamp(c.consumer, c.state.task, setup_in);
        K::setup(as_k(c));
    }
    __device__ static void compute(args &c) {
        if (c.iter < MAX_STAGES) stamp(c.consumer, c.state.task, compute_in + c.iter);
        K::compute(as_k(c));
        if (c.iter < MAX_STAGES) stamp(c.consumer, c.state.task, compute_out + c.iter);
    }
    __device__ static void drain(args &c) {
        K::drain(as_k(c));
        stamp(c.consumer, c.state.task, drain_out);
    }
    __device__ static void finish(args &c) {
        K::finish(as_k(c));
        stamp(c.consumer, c.state.task, finish_out);
        c.state.task++;
    }
    // Stamped under the task whose first stages it overlaps (the previous task's output).
    __device__ static void store(args &c, int first, int last) {
        if (first == 0) stamp(c.consumer, c.state.task, store_in);
        K::store(as_k(c), first, last);
        if (last == K::STORE_PIECES) stamp(c.consumer, c.state.task, store_out);
    }
};

template <typename G> float time_us(const bf16 *a, const bf16 *b, bf16 *c, int M, int N, int K, int reps) {
    typename G::globals g{typename G::a_gl(const_cast<bf16 *>(a), 1, 1, M, K), typename G::b_gl(const_cast<bf16 *>(b), 1, 1, N, K),
                          typename G::c_gl(c, 1, 1, M, N), (M + G::BM - 1) / G::BM, (N + G::BLOCK_N - 1) / G::BLOCK_N,
                          (K + G::BK - 1) / G::BK, 1, (K + G::BK - 1) / G::BK, nullptr, nullptr,
                          typename G::bias_gl(nullptr, 1, 1, 1, N)};
    const int tasks = g.tiles_m * g.tiles_n;
    return timeline::time_us([&] { kittens::lcsf::launch<G>(g, tasks, 0); }, reps);
}

} // namespace

int main(int argc, char **argv) {
    const int K = argc > 1 ? std::atoi(argv[1]) : 256, M = argc > 2 ? std::atoi(argv[2]) : 4096, N = M;
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    bf16 *a, *b, *c;
    unsigned long long *stamps;
    cudaMalloc(&a, size_t(M) * K * 2);
    cudaMalloc(&b, size_t(N) * K * 2);
    cudaMalloc(&c, size_t(M) * N * 2);
    cudaMemset(a, 0x3c, size_t(M) * K * 2);
    cudaMemset(b, 0x3c, size_t(N) * K * 2);
    const size_t count = size_t(sms) * ROLES * MAX_TASKS * EVENTS;
    cudaMalloc(&stamps, count * 8);
    cudaMemcpyToSymbol(g_stamps, &stamps, sizeof(stamps));

    std::printf("%dx%dx%d: %.2f us unstamped, %.2f us stamped\n", M, N, K, time_us<timed>(a, b, c, M, N, K, 50),
                time_us<stamped<timed>>(a, b, c, M, N, K, 50));
    cudaMemset(stamps, 0, count * 8);
    time_us<stamped<timed>>(a, b, c, M, N, K, 1); // the last launch's stamps are what remain
    cudaDeviceSynchronize();
    std::vector<unsigned long long> h(count);
    cudaMemcpy(h.data(), stamps, count * 8, cudaMemcpyDeviceToHost);
    auto at = [&](int block, int role, int task, int ev) { return h[((size_t(block) * ROLES + role) * MAX_TASKS + task) * EVENTS + ev]; };

    for (int block : {0, sms / 2}) {
        for (int role = 0; role < 2; role++) {
            const unsigned long long t0 = at(block, role, 0, setup_in);
            std::printf("block %d, consumer %d (cycles from its first setup; stage: producer load / compute in / out):", block, role);
            for (int t = 0; t < MAX_TASKS && at(block, role, t, setup_in); t++) {
                auto rel = [&](int r, int ev) { const auto v = at(block, r, t, ev); return v ? (long long)(v - t0) : -1LL; };
                std::printf("\n  task %d: setup %lld, store of the previous task %lld-%lld, drain %lld, finish %lld\n   ", t,
                            rel(role, setup_in), rel(role, store_in), rel(role, store_out), rel(role, drain_out), rel(role, finish_out));
                for (int s = 0; s < MAX_STAGES && at(block, role, t, compute_in + s); s++)
                    std::printf(" [%d] %lld/%lld/%lld", s, rel(2, compute_in + s), rel(role, compute_in + s), rel(role, compute_out + s));
            }
            std::printf("\n");
        }
    }
    double period = 0, store = 0, boundary = 0;
    int n = 0;
    for (int block = 0; block < sms; block++)
        for (int t = 1; t < MAX_TASKS && at(block, 0, t, setup_in); t++) {
            period += at(block, 0, t, compute_in) - at(block, 0, t - 1, compute_in);
            if (at(block, 0, t, store_out)) store += at(block, 0, t, store_out) - at(block, 0, t, store_in);
            boundary += at(block, 0, t, compute_in) - at(block, 0, t - 1, drain_out);
            n++;
        }
    if (n) std::printf("mean over blocks (consumer 0, cycles): task period %.0f, store %.0f, last wgmma done -> next task's first issue %.0f\n",
                       period / n, store / n, boundary / n);
    return 0;
}
