// Where a GEMM task's time goes: a shipped bf16 configuration (kernels/gemm/gemm_configs.cuh, both operands K-major)
// wrapped so that each hook of the GEMM main loop (kernels/gemm/gemm_pipeline.cuh) stamps clock64 (first lane of
// each consumer warpgroup, and the producer's loads), then one launch's stamps printed per task for two blocks, with
// averages over all blocks.
//
//   python tools/profile/build.py tools/profile/gemm_timeline.cu -o /tmp/gemm_timeline
//   /tmp/gemm_timeline [hinted|resident] [K=256] [M=N=4096]          (on a GPU machine)
//
// Cycle counts are per SM (clock64). The stamps slow the kernel down: read them as a breakdown, and time changes
// with the unstamped kernel (also printed).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gemm/gemm_launch.cuh"
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

// The timed configuration: resident, or else hinted.
template <bool RESIDENT_B>
using timed = gemm<bf16, bf16, major::k, major::k, RESIDENT_B ? configs::resident() : configs::hinted()>;

// The kernel K with stamps around its hooks.
template <typename K> struct stamped : timeline::wrapped<stamped<K>, K, consumer_args, producer_args> {
    using base = timeline::wrapped<stamped<K>, K, consumer_args, producer_args>;
    using args = typename base::args;
    using base::as_k;
    static_assert(K::NUM_CONSUMERS == ROLES - 1, "the stamps have room for two consumer warpgroups");

    // The producer's current task (this block's task number), counted from launch.
    __device__ static int &producer_task() {
        __shared__ int task;
        return task;
    }
    __device__ static void prepare(const typename K::globals &g) {
        producer_task() = -1;
        K::prepare(g);
    }
    __device__ static void load(typename base::producer &p) {
        if (p.iter == 0) producer_task()++;
        if (p.iter < MAX_STAGES) stamp(ROLES - 1, producer_task(), compute_in + p.iter);
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
    const gemm_problem p{.a = a, .b = b, .a_kmajor = true, .b_kmajor = true, .c = c, .M = M, .N = N, .K = K};
    return timeline::time_us([&] { launch_gemm<G>(p, 0); }, reps);
}

template <typename G> int run(int M, int N, int K) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    bf16 *a, *b, *c;
    unsigned long long *stamps;
    cudaMalloc(&a, size_t(M) * K * 2);
    cudaMalloc(&b, size_t(N) * K * 2);
    cudaMalloc(&c, size_t(M) * N * 2);
    timeline::fill_random<<<256, 256>>>(a, size_t(M) * K, 1);
    timeline::fill_random<<<256, 256>>>(b, size_t(N) * K, 2);
    const size_t count = size_t(sms) * ROLES * MAX_TASKS * EVENTS;
    cudaMalloc(&stamps, count * 8);
    cudaMemcpyToSymbol(g_stamps, &stamps, sizeof(stamps));

    std::printf("%dx%dx%d: %.2f us unstamped, %.2f us stamped\n", M, N, K, time_us<G>(a, b, c, M, N, K, 50),
                time_us<stamped<G>>(a, b, c, M, N, K, 50));
    cudaMemset(stamps, 0, count * 8);
    time_us<stamped<G>>(a, b, c, M, N, K, 1); // the last launch's stamps are what remain
    cudaDeviceSynchronize();
    std::vector<unsigned long long> h(count);
    cudaMemcpy(h.data(), stamps, count * 8, cudaMemcpyDeviceToHost);
    auto at = [&](int block, int role, int task, int ev) { return h[((size_t(block) * ROLES + role) * MAX_TASKS + task) * EVENTS + ev]; };

    for (int block : {0, sms / 2}) {
        for (int role = 0; role < ROLES - 1; role++) {
            const unsigned long long t0 = at(block, role, 0, setup_in);
            std::printf("block %d, consumer %d (cycles from its first setup; stage: producer load / compute in / out):", block, role);
            for (int t = 0; t < MAX_TASKS && at(block, role, t, setup_in); t++) {
                auto rel = [&](int r, int ev) { const auto v = at(block, r, t, ev); return v ? (long long)(v - t0) : -1LL; };
                std::printf("\n  task %d: setup %lld, store of the previous task %lld-%lld, drain %lld, finish %lld\n   ", t,
                            rel(role, setup_in), rel(role, store_in), rel(role, store_out), rel(role, drain_out), rel(role, finish_out));
                for (int s = 0; s < MAX_STAGES && at(block, role, t, compute_in + s); s++)
                    std::printf(" [%d] %lld/%lld/%lld", s, rel(ROLES - 1, compute_in + s), rel(role, compute_in + s),
                                rel(role, compute_out + s));
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

} // namespace

int main(int argc, char **argv) {
    const char *config = argc > 1 ? argv[1] : "hinted";
    const int K = argc > 2 ? std::atoi(argv[2]) : 256, M = argc > 3 ? std::atoi(argv[3]) : 4096, N = M;
    if (std::strcmp(config, "hinted") == 0) return run<timed<false>>(M, N, K);
    if (std::strcmp(config, "resident") == 0) {
        if (K > resident_max_k(sizeof(bf16))) {
            std::printf("the resident configuration holds K <= %d\n", resident_max_k(sizeof(bf16)));
            return 1;
        }
        return run<timed<true>>(M, N, K);
    }
    std::printf("usage: %s [hinted|resident] [K=256] [M=N=4096]\n", argv[0]);
    return 1;
}
