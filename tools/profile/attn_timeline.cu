// Where an attention-forward task's time goes: the kernel wrapped so that every LCSF hook stamps clock64 (first
// lane of each consumer warpgroup, and the producer's loads), then one launch's stamps summed per consumer over
// all blocks, plus the first tasks of block 0 in full.
//
//   python tools/profile/build.py tools/profile/attn_timeline.cu -o /tmp/attn_timeline
//   /tmp/attn_timeline D causal N [batch=16384/N] [heads=16]     (on a GPU machine)
//
// Cycle counts are per SM (clock64). The stamps slow the kernel down: read them as a breakdown, and time changes
// with the unstamped kernel (also printed).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "attention/attention_fwd_launch.cuh"
#include "timeline.cuh"

using namespace tk_attention;
using kittens::bf16;

namespace {

constexpr int MAX_TASKS = 24, MAX_TILES = 40, ROLES = 4; // roles: consumers 0-2, producer
enum event { setup_in, setup_out, finish_in, finish_out, compute_in = 4, compute_out = compute_in + MAX_TILES,
             EVENTS = compute_out + MAX_TILES };

__device__ unsigned long long *g_stamps;
__device__ int g_producer_task[1024];

__device__ __forceinline__ void stamp(int role, int task, int ev) {
    if (task < MAX_TASKS && threadIdx.x % kittens::WARPGROUP_THREADS == 0)
        g_stamps[((blockIdx.x * ROLES + role) * MAX_TASKS + task) * EVENTS + ev] = timeline::now();
}

// The kernel K with stamps around its hooks.
template <typename K> struct stamped : timeline::wrapped<stamped<K>, K> {
    using base = timeline::wrapped<stamped<K>, K>;
    using args = typename base::args;
    using base::as_k;

    __device__ static void load(typename base::producer &p) {
        if (p.iter == 0 && p.task.id != int(blockIdx.x)) g_producer_task[blockIdx.x]++;
        if (p.iter < MAX_TILES) stamp(3, g_producer_task[blockIdx.x], compute_in + p.iter);
        K::load(as_k(p));
    }
    __device__ static void setup(args &c) {
        stamp(c.consumer, c.state.task, setup_in);
        K::setup(as_k(c));
        stamp(c.consumer, c.state.task, setup_out);
    }
    __device__ static void compute(args &c) {
        if (c.iter < MAX_TILES) stamp(c.consumer, c.state.task, compute_in + c.iter);
        K::compute(as_k(c));
        if (c.iter < MAX_TILES) stamp(c.consumer, c.state.task, compute_out + c.iter);
    }
    __device__ static void finish(args &c) {
        stamp(c.consumer, c.state.task, finish_in);
        K::finish(as_k(c));
        stamp(c.consumer, c.state.task, finish_out);
        c.state.task++;
    }
};

template <typename K> float time_us(const fwd_problem &p, int reps) {
    return timeline::time_us([&] { launch_forward<K>(p, 0); }, reps);
}

template <int D, bool CAUSAL> int run(int n, int batch, int heads) {
    using K = attn_fwd<bf16, D, variant{.banded = CAUSAL}>;
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const size_t elems = size_t(batch) * heads * n * D;
    bf16 *q, *k, *v, *o;
    float *lse;
    int *counter; // the forward's task counter: zero once, the kernel leaves it zero
    cudaMalloc(&counter, 2 * sizeof(int));
    cudaMemset(counter, 0, 2 * sizeof(int));
    cudaMalloc(&q, elems * 2);
    cudaMalloc(&k, elems * 2);
    cudaMalloc(&v, elems * 2);
    cudaMalloc(&o, elems * 2);
    cudaMalloc(&lse, size_t(batch) * heads * n * 4);
    cudaMemset(q, 0x3c, elems * 2);
    cudaMemset(k, 0x3b, elems * 2);
    cudaMemset(v, 0x3c, elems * 2);
    const int64_t sh = int64_t(n) * D, sb = sh * heads;
    fwd_problem p{{q, sb, sh, D}, {k, sb, sh, D}, {v, sb, sh, D}, {o, sb, sh, D}, lse, counter,
                  batch, heads, heads, n, n, D, CAUSAL ? band{WINDOW_UNLIMITED, 0} : band{}, 1.f / 11.3137f, 0.f,
                  dtype::bf16};

    unsigned long long *stamps;
    const size_t count = size_t(sms) * ROLES * MAX_TASKS * EVENTS;
    cudaMalloc(&stamps, count * 8);
    cudaMemcpyToSymbol(g_stamps, &stamps, sizeof(stamps));
    const double flops = 4.0 * batch * heads * double(n) * n * D / (CAUSAL ? 2 : 1);
    const float plain = time_us<K>(p, 30), with = time_us<stamped<K>>(p, 30);
    std::printf("D=%d causal=%d N=%d B=%d H=%d: %.1f us unstamped (%.0f TFLOP/s), %.1f us stamped\n", D, int(CAUSAL), n,
                batch, heads, plain, flops / plain * 1e-6, with);
    // One more launch on cleared stamps and producer task counters.
    std::vector<int> zero(1024, 0);
    cudaMemset(stamps, 0, count * 8);
    cudaMemcpyToSymbol(g_producer_task, zero.data(), zero.size() * sizeof(int));
    launch_forward<stamped<K>>(p, 0);
    cudaDeviceSynchronize();
    std::vector<unsigned long long> h(count);
    cudaMemcpy(h.data(), stamps, count * 8, cudaMemcpyDeviceToHost);
    auto at = [&](int block, int role, int task, int ev) -> long long {
        return (long long)h[((size_t(block) * ROLES + role) * MAX_TASKS + task) * EVENTS + ev];
    };

    // Block 0 in full: per task and consumer, cycles from the block's first setup.
    const long long t0 = at(0, 0, 0, setup_in);
    for (int t = 0; t < 4 && at(0, 0, t, setup_in); t++) {
        std::printf("block 0 task %d (cycles from the block's start; per tile: producer issue | c0 in-out | c1 | c2)\n", t);
        for (int c = 0; c < 3; c++)
            std::printf("  c%d: setup %lld-%lld, finish %lld-%lld\n", c, at(0, c, t, setup_in) - t0, at(0, c, t, setup_out) - t0,
                        at(0, c, t, finish_in) - t0, at(0, c, t, finish_out) - t0);
        for (int i = 0; i < MAX_TILES && at(0, 0, t, compute_in + i); i++) {
            std::printf("  [%2d] %7lld |", i, at(0, 3, t, compute_in + i) ? at(0, 3, t, compute_in + i) - t0 : -1);
            for (int c = 0; c < 3; c++)
                std::printf(" %7lld-%7lld", at(0, c, t, compute_in + i) - t0, at(0, c, t, compute_out + i) - t0);
            std::printf("\n");
        }
    }

    // All blocks: where each consumer's cycles go, summed over the stamped tasks.
    std::printf("\nper consumer, summed over blocks and their first %d tasks (share of the consumer's span):\n", MAX_TASKS);
    std::printf("  consumer | span | setup | first-tile wait | compute (busy) | compute (skipped) | waits between tiles | finish | between tasks\n");
    for (int c = 0; c < 3; c++) {
        double span = 0, setup = 0, first = 0, busy = 0, skipped = 0, gaps = 0, fin = 0, between = 0;
        long long tiles = 0, tasks = 0;
        for (int b = 0; b < sms; b++) {
            int last = -1;
            for (int t = 0; t < MAX_TASKS && at(b, c, t, finish_out); t++) last = t;
            if (last < 0) continue;
            span += at(b, c, last, finish_out) - at(b, c, 0, setup_in);
            for (int t = 0; t <= last; t++) {
                tasks++;
                setup += at(b, c, t, setup_out) - at(b, c, t, setup_in);
                if (t > 0) between += at(b, c, t, setup_in) - at(b, c, t - 1, finish_out);
                fin += at(b, c, t, finish_out) - at(b, c, t, finish_in);
                long long prev = at(b, c, t, setup_out);
                for (int i = 0; i < MAX_TILES && at(b, c, t, compute_in + i); i++) {
                    const long long d = at(b, c, t, compute_out + i) - at(b, c, t, compute_in + i);
                    (d < 200 ? skipped : busy) += d;
                    (i == 0 ? first : gaps) += at(b, c, t, compute_in + i) - prev;
                    prev = at(b, c, t, compute_out + i);
                    tiles++;
                }
                if (at(b, c, t, finish_in)) gaps += at(b, c, t, finish_in) - prev;
            }
        }
        auto pct = [&](double x) { return 100.0 * x / span; };
        std::printf("  c%d | %.0f cyc/task | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%%   (%lld tasks, %.1f tiles/task, %.0f busy cyc/tile)\n",
                    c, span / tasks, pct(setup), pct(first), pct(busy), pct(skipped), pct(gaps), pct(fin), pct(between), tasks,
                    double(tiles) / tasks, busy / tiles);
    }
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    const int d = argc > 1 ? std::atoi(argv[1]) : 128, causal = argc > 2 ? std::atoi(argv[2]) : 0;
    const int n = argc > 3 ? std::atoi(argv[3]) : 1024;
    const int batch = argc > 4 ? std::atoi(argv[4]) : (16384 / n > 0 ? 16384 / n : 1), heads = argc > 5 ? std::atoi(argv[5]) : 16;
    const cudaError_t e = with_head_dim(d, [&](auto dim) {
        constexpr int D = decltype(dim)::value;
        causal ? run<D, true>(n, batch, heads) : run<D, false>(n, batch, heads);
        return cudaGetLastError();
    });
    if (e != cudaSuccess) std::printf("D = %d: %s\n", d, cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : 1;
}
