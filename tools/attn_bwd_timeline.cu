// Where a backward step's cycles go: the backward kernel with clock64 marks at the points named by bwd_mark
// (attn_bwd_kernel.cuh) and around each LCSF hook, one launch, then per consumer the mean cycles between
// consecutive marks, split into steps that run a dQ product and steps that do not.
//
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -diag-suppress=20012 \
//        -Iinclude/kittens -Ikernels -Ikernels/attention -Itools -o /tmp/attn_bwd_timeline \
//        tools/attn_bwd_timeline.cu kernels/attention/attn_bwd_prep.cu kernels/attention/attn_fwd_d64.cu \
//        kernels/attention/attn_fwd_d128.cu          [-DATTN_BWD_DEFER_DQ=0|1 to force the dQ schedule]
//   /tmp/attn_bwd_timeline D causal N [batch=16384/N] [heads=16]     (on a GPU machine)
//
// Marks come from the first thread of each consumer warpgroup. They slow the kernel by a few percent (both times
// are printed): read the result as a breakdown, and time changes with the unmarked kernel.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "timeline.cuh"

namespace {
constexpr int MAX_STEPS = 512, MAX_TASKS = 64, CONSUMERS = 2;
enum task_mark { setup_in, setup_out, finish_in, finish_out, first_step, task_marks };
} // namespace

__device__ unsigned long long *g_marks;      // [block][consumer][step][bwd_mark]
__device__ unsigned long long *g_task_marks; // [block][consumer][task][task_mark]

__device__ __forceinline__ void bwd_stamp(int consumer, int step, int event, int events) {
    if (g_marks && step < MAX_STEPS && threadIdx.x % kittens::WARPGROUP_THREADS == 0)
        g_marks[((size_t(blockIdx.x) * CONSUMERS + consumer) * MAX_STEPS + step) * events + event] = timeline::now();
}
#define ATTN_BWD_MARK(c, event) bwd_stamp((c).consumer, (c).state.steps - 1, event, bwd_marks)

#include "attn_bwd_launch.cuh"
#include "attn_fwd_launch.cuh"

using namespace tk_attention;
using kittens::bf16;

namespace {

__device__ __forceinline__ void task_stamp(int consumer, int task, int event, unsigned long long value) {
    if (g_task_marks && task < MAX_TASKS && threadIdx.x % kittens::WARPGROUP_THREADS == 0)
        g_task_marks[((size_t(blockIdx.x) * CONSUMERS + consumer) * MAX_TASKS + task) * task_marks + event] = value;
}

// The kernel K with marks around its hooks.
template <typename K> struct marked : timeline::wrapped<marked<K>, K> {
    using base = timeline::wrapped<marked<K>, K>;
    using args = typename base::args;
    using base::as_k;

    __device__ static void load(typename base::producer &p) { K::load(as_k(p)); }
    __device__ static void setup(args &c) {
        task_stamp(c.consumer, c.state.task, setup_in, timeline::now());
        task_stamp(c.consumer, c.state.task, first_step, c.state.steps);
        K::setup(as_k(c));
        task_stamp(c.consumer, c.state.task, setup_out, timeline::now());
    }
    __device__ static void compute(args &c) {
        bwd_stamp(c.consumer, c.state.steps, mark_in, bwd_marks);
        K::compute(as_k(c));
        bwd_stamp(c.consumer, c.state.steps - 1, mark_out, bwd_marks);
    }
    __device__ static void finish(args &c) {
        task_stamp(c.consumer, c.state.task, finish_in, timeline::now());
        K::finish(as_k(c));
        task_stamp(c.consumer, c.state.task, finish_out, timeline::now());
        c.state.task++;
    }
};

const char *mark_name[bwd_marks] = {"stage wait", "S,dP", "P,dS", "dS free", "dS out", "dK,dV wait", "dS ready", "dQ product",
                                    "dQ out"};

template <int D, bool CAUSAL> int run(int n, int batch, int heads) {
    using K = attn_bwd<bf16, D, CAUSAL>;
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const size_t elems = size_t(batch) * heads * n * D, rows = size_t(batch) * heads * padded_q_len(n);
    const int64_t sh = int64_t(n) * D, sb = sh * heads;
    std::vector<void *> buffers;
    auto alloc = [&](size_t bytes) {
        void *p = nullptr;
        if (cudaMalloc(&p, bytes) != cudaSuccess) std::exit(1);
        buffers.push_back(p);
        return p;
    };
    bf16 *q = (bf16 *)alloc(elems * 2), *k = (bf16 *)alloc(elems * 2), *v = (bf16 *)alloc(elems * 2);
    bf16 *o = (bf16 *)alloc(elems * 2), *dout = (bf16 *)alloc(elems * 2), *dk = (bf16 *)alloc(elems * 2),
         *dv = (bf16 *)alloc(elems * 2);
    float *lse = (float *)alloc(size_t(batch) * heads * n * 4), *lse2 = (float *)alloc(rows * 4),
          *delta = (float *)alloc(rows * 4), *dq = (float *)alloc(rows * D * 4);
    int *counter = (int *)alloc(4);
    uint32_t seed = 1;
    for (bf16 *t : {q, k, v, dout}) timeline::fill_random<<<1024, 256>>>(t, elems, seed++);
    auto in = [&](const bf16 *t) { return tensor4{t, sb, sh, D}; };
    auto out = [&](void *t) { return out4{t, sb, sh, D}; };
    const float scale = 1.f / std::sqrt(float(D));
    const fwd_problem f{in(q), in(k), in(v), out(o), lse, counter, batch, heads, heads, n, n, D, CAUSAL, scale, dtype::bf16};
    if ((D == 64 ? forward_d64(f, 0) : forward_d128(f, 0)) != cudaSuccess) return 1;
    const bwd_problem p{in(q), in(k), in(v), in(o), in(dout), lse, lse2, delta, dq, out(dk), out(dv),
                        batch, heads, heads, n, n, D, CAUSAL, scale, dtype::bf16};
    if (backward_prepare(p, 0) != cudaSuccess) return 1;

    const size_t count = size_t(sms) * CONSUMERS * MAX_STEPS * bwd_marks, task_count = size_t(sms) * CONSUMERS * MAX_TASKS * task_marks;
    auto *marks = (unsigned long long *)alloc(count * 8), *tmarks = (unsigned long long *)alloc(task_count * 8);
    const double flops = 2.5 * 4.0 * batch * heads * double(n) * n * D / (CAUSAL ? 2 : 1);
    // Marks off (null buffers: each mark is then a load and a branch), then on.
    const float plain = timeline::time_us([&] { launch_backward<marked<K>>(p, 0); }, 20);
    cudaMemcpyToSymbol(g_marks, &marks, sizeof(marks));
    cudaMemcpyToSymbol(g_task_marks, &tmarks, sizeof(tmarks));
    const float with = timeline::time_us([&] { launch_backward<marked<K>>(p, 0); }, 20);
    std::printf("D=%d causal=%d N=%d B=%d H=%d defer_dq=%d: %.1f us marks off (%.0f TFLOP/s), %.1f us marks on\n", D,
                int(CAUSAL), n, batch, heads, int(K::DEFER_DQ), plain, flops / plain * 1e-6, with);
    cudaMemset(marks, 0, count * 8);
    cudaMemset(tmarks, 0, task_count * 8);
    launch_backward<marked<K>>(p, 0);
    if (cudaDeviceSynchronize() != cudaSuccess) return 1;
    std::vector<unsigned long long> h(count), ht(task_count);
    cudaMemcpy(h.data(), marks, count * 8, cudaMemcpyDeviceToHost);
    cudaMemcpy(ht.data(), tmarks, task_count * 8, cudaMemcpyDeviceToHost);
    auto at = [&](int b, int c, int s, int e) -> long long { return (long long)h[((size_t(b) * CONSUMERS + c) * MAX_STEPS + s) * bwd_marks + e]; };
    auto tat = [&](int b, int c, int t, int e) -> long long { return (long long)ht[((size_t(b) * CONSUMERS + c) * MAX_TASKS + t) * task_marks + e]; };

    // Per consumer and kind of step (with or without a dQ product): mean cycles from the previous mark to each mark.
    // "stage wait" is from the previous step's end (steps right after a task boundary are left out of it).
    for (int c = 0; c < CONSUMERS; c++) {
        for (int kind = 0; kind < 2; kind++) {
            double sum[bwd_marks] = {}, total = 0;
            long long cnt[bwd_marks] = {}, steps = 0;
            for (int b = 0; b < sms; b++) {
                std::vector<bool> task_start(MAX_STEPS, false);
                for (int t = 0; t < MAX_TASKS && tat(b, c, t, setup_in); t++)
                    if (tat(b, c, t, first_step) < MAX_STEPS) task_start[tat(b, c, t, first_step)] = true;
                for (int s = 0; s < MAX_STEPS && at(b, c, s, mark_out); s++) {
                    if ((at(b, c, s, mark_ready) != 0) != (kind == 1)) continue;
                    long long prev = at(b, c, s, mark_in);
                    if (s > 0 && !task_start[s]) {
                        sum[mark_in] += at(b, c, s, mark_in) - at(b, c, s - 1, mark_out);
                        cnt[mark_in]++;
                    }
                    for (int e = mark_in + 1; e < bwd_marks; e++) {
                        if (!at(b, c, s, e)) continue;
                        sum[e] += at(b, c, s, e) - prev;
                        cnt[e]++;
                        prev = at(b, c, s, e);
                    }
                    total += at(b, c, s, mark_out) - at(b, c, s, mark_in);
                    steps++;
                }
            }
            if (!steps) continue;
            std::printf("  consumer %d, %s dQ (%lld steps): in-step %.0f cycles |", c, kind ? "with" : "without", steps, total / steps);
            for (int e = 0; e < bwd_marks; e++)
                if (cnt[e]) std::printf(" %s %.0f", mark_name[e], sum[e] / cnt[e]);
            std::printf("\n");
        }
        double setup = 0, finish = 0, span = 0;
        long long tasks = 0;
        for (int b = 0; b < sms; b++) {
            int last = -1;
            for (int t = 0; t < MAX_TASKS && tat(b, c, t, finish_out); t++) last = t;
            for (int t = 0; t <= last; t++) {
                setup += tat(b, c, t, setup_out) - tat(b, c, t, setup_in);
                finish += tat(b, c, t, finish_out) - tat(b, c, t, finish_in);
                tasks++;
            }
            if (last >= 0) span += tat(b, c, last, finish_out) - tat(b, c, 0, setup_in);
        }
        if (tasks)
            std::printf("  consumer %d: %lld tasks, setup %.0f, finish %.0f cycles per task, %.0f cycles per task in all\n", c, tasks,
                        setup / tasks, finish / tasks, span / tasks);
    }
    for (void *b : buffers) cudaFree(b);
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    const int d = argc > 1 ? std::atoi(argv[1]) : 128, causal = argc > 2 ? std::atoi(argv[2]) : 0;
    const int n = argc > 3 ? std::atoi(argv[3]) : 2048;
    const int batch = argc > 4 ? std::atoi(argv[4]) : (16384 / n > 0 ? 16384 / n : 1), heads = argc > 5 ? std::atoi(argv[5]) : 16;
    if (d == 64) return causal ? run<64, true>(n, batch, heads) : run<64, false>(n, batch, heads);
    return causal ? run<128, true>(n, batch, heads) : run<128, false>(n, batch, heads);
}
