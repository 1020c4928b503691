// Where the attention backward's cycles go: the main kernel wrapped so that its hooks (setup, each step's compute,
// finish, and the dQ conversion after a consumer's last task) stamp clock64, one launch, then per consumer the mean
// cycles of a step, split into steps that run a dQ product and steps that do not, and of the hooks around them.
//
//   python tools/profile/build.py tools/profile/attn_bwd_timeline.cu -o /tmp/attn_bwd_timeline
//   /tmp/attn_bwd_timeline D causal N [batch=16384/N] [heads=16]     (on a GPU machine)
//
// Stamps come from the first thread of each consumer warpgroup. They slow the kernel down (both times are printed):
// read the result as a breakdown, and time changes with the unstamped kernel. A step's owner runs the dQ product of
// its previous step at the end of this one (attention_bwd_kernel.cuh), so "with dQ" steps are those of the owner.
//
// link: kernels/attention/attention_bwd_prep.cu
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "attention/attention_bwd_launch.cuh"
#include "attention/attention_fwd_launch.cuh"
#include "timeline.cuh"

using namespace tk_attention;
using kittens::bf16;

namespace {

constexpr int MAX_STEPS = 512, MAX_TASKS = 64, CONSUMERS = 2;
enum step_mark { step_in, step_out, step_with_dq, step_marks };
enum task_mark { setup_in, setup_out, finish_in, finish_out, first_step, task_marks };
enum tail_mark { after_in, after_out, tail_marks };

__device__ unsigned long long *g_steps; // [block][consumer][step][step_mark]
__device__ unsigned long long *g_tasks; // [block][consumer][task][task_mark]
__device__ unsigned long long *g_tail;  // [block][consumer][tail_mark]

__device__ __forceinline__ bool stamping() { return threadIdx.x % kittens::WARPGROUP_THREADS == 0; }
__device__ __forceinline__ void step_stamp(int consumer, int step, int mark, unsigned long long value) {
    if (g_steps && step < MAX_STEPS && stamping())
        g_steps[((size_t(blockIdx.x) * CONSUMERS + consumer) * MAX_STEPS + step) * step_marks + mark] = value;
}
__device__ __forceinline__ void task_stamp(int consumer, int task, int mark, unsigned long long value) {
    if (g_tasks && task < MAX_TASKS && stamping())
        g_tasks[((size_t(blockIdx.x) * CONSUMERS + consumer) * MAX_TASKS + task) * task_marks + mark] = value;
}
__device__ __forceinline__ void tail_stamp(int consumer, int mark) {
    if (g_tail && stamping()) g_tail[(size_t(blockIdx.x) * CONSUMERS + consumer) * tail_marks + mark] = timeline::now();
}

// The kernel K with stamps around its hooks.
template <typename K> struct stamped : timeline::wrapped<stamped<K>, K> {
    using base = timeline::wrapped<stamped<K>, K>;
    using args = typename base::args;
    using state_t = typename base::consumer_state;
    using base::as_k;

    __device__ static void load(typename base::producer &p) { K::load(as_k(p)); }
    __device__ static void setup(args &c) {
        task_stamp(c.consumer, c.state.task, setup_in, timeline::now());
        task_stamp(c.consumer, c.state.task, first_step, c.state.steps);
        K::setup(as_k(c));
        task_stamp(c.consumer, c.state.task, setup_out, timeline::now());
    }
    __device__ static void compute(args &c) {
        const int step = c.state.steps;
        // The owner of the previous step (its parity) computes that step's dQ in this one.
        const bool with_dq = c.state.dq_pending && ((step - 1) & 1) == c.consumer;
        step_stamp(c.consumer, step, step_with_dq, with_dq);
        step_stamp(c.consumer, step, step_in, timeline::now());
        K::compute(as_k(c));
        step_stamp(c.consumer, step, step_out, timeline::now());
    }
    __device__ static void finish(args &c) {
        task_stamp(c.consumer, c.state.task, finish_in, timeline::now());
        K::finish(as_k(c));
        task_stamp(c.consumer, c.state.task, finish_out, timeline::now());
        c.state.task++;
    }
    __device__ static void after_tasks(const typename K::globals &g, const state_t &state) {
        const int consumer = kittens::warpgroupid();
        tail_stamp(consumer, after_in);
        K::after_tasks(g, state);
        tail_stamp(consumer, after_out);
    }
};

template <typename T> T *device_alloc(std::vector<void *> &buffers, size_t count) {
    void *p = nullptr;
    if (cudaMalloc(&p, count * sizeof(T)) != cudaSuccess) std::exit(1);
    buffers.push_back(p);
    return static_cast<T *>(p);
}

template <int D, bool CAUSAL> cudaError_t run(int n, int batch, int heads) {
    using K = attn_bwd<bf16, D, variant{.banded = CAUSAL}>;
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const size_t elems = size_t(batch) * heads * n * D;
    const int64_t sh = int64_t(n) * D, sb = sh * heads;
    std::vector<void *> buffers;
    bf16 *q = device_alloc<bf16>(buffers, elems), *k = device_alloc<bf16>(buffers, elems), *v = device_alloc<bf16>(buffers, elems);
    bf16 *o = device_alloc<bf16>(buffers, elems), *dout = device_alloc<bf16>(buffers, elems);
    bf16 *dq = device_alloc<bf16>(buffers, elems), *dk = device_alloc<bf16>(buffers, elems), *dv = device_alloc<bf16>(buffers, elems);
    float *lse = device_alloc<float>(buffers, size_t(batch) * heads * n);
    int *counter = device_alloc<int>(buffers, 2); // the forward's task counter: zero once, the kernel leaves it zero
    cudaMemset(counter, 0, 2 * sizeof(int));
    uint32_t seed = 1;
    for (bf16 *t : {q, k, v, dout}) timeline::fill_random<<<1024, 256>>>(t, elems, seed++);
    auto in = [&](const bf16 *t) { return tensor4{t, sb, sh, D}; };
    auto out = [&](void *t) { return out4{t, sb, sh, D}; };
    const float scale = 1.f / std::sqrt(float(D));
    const band window = CAUSAL ? band{WINDOW_UNLIMITED, 0} : band{};
    const fwd_problem f{in(q), in(k), in(v), out(o), lse, counter, batch, heads, heads, n, n, D, window, scale, 0.f,
                        dtype::bf16};
    if (cudaError_t e = launch_forward<attn_fwd<bf16, D, variant{.banded = CAUSAL}>>(f, 0); e != cudaSuccess) return e;

    // The scratch as the binding allocates it, dQ converted in the kernel where the shipped path does.
    bwd_problem p{in(q), in(k), in(v), in(o), in(dout), lse, nullptr, nullptr, nullptr, out(dk), out(dv),
                  batch, heads, heads, n, n, D, window, scale, 0.f, dtype::bf16};
    const bwd_scratch_layout scratch = bwd_scratch(p);
    p.lse2 = device_alloc<float>(buffers, scratch.row_floats);
    p.delta = device_alloc<float>(buffers, scratch.row_floats);
    p.dq_accum = device_alloc<float>(buffers, scratch.dq_floats);
    p.dq = out(dq);
    p.sync = device_alloc<int>(buffers, scratch.ints);
    // The preparation and the main kernel, as backward() runs them (the preparation zeroes what the kernel adds into).
    auto backward_main = [&] {
        backward_prepare(p, 0);
        launch_backward<stamped<K>>(p, 0);
    };

    const size_t step_count = size_t(sms) * CONSUMERS * MAX_STEPS * step_marks;
    const size_t task_count = size_t(sms) * CONSUMERS * MAX_TASKS * task_marks, tail_count = size_t(sms) * CONSUMERS * tail_marks;
    auto *steps = device_alloc<unsigned long long>(buffers, step_count);
    auto *tasks = device_alloc<unsigned long long>(buffers, task_count);
    auto *tail = device_alloc<unsigned long long>(buffers, tail_count);
    const double flops = 2.5 * 4.0 * batch * heads * double(n) * n * D / (CAUSAL ? 2 : 1);
    // Stamps off (null buffers: each stamp is then a load and a branch), then on.
    const float plain = timeline::time_us(backward_main, 20);
    cudaMemcpyToSymbol(g_steps, &steps, sizeof(steps));
    cudaMemcpyToSymbol(g_tasks, &tasks, sizeof(tasks));
    cudaMemcpyToSymbol(g_tail, &tail, sizeof(tail));
    const float with = timeline::time_us(backward_main, 20);
    std::printf("D=%d causal=%d N=%d B=%d H=%d, preparation + main kernel: %.1f us stamps off (%.0f TFLOP/s), %.1f us on\n",
                D, int(CAUSAL), n, batch, heads, plain, flops / plain * 1e-6, with);
    cudaMemset(steps, 0, step_count * 8);
    cudaMemset(tasks, 0, task_count * 8);
    cudaMemset(tail, 0, tail_count * 8);
    backward_main();
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return e;
    std::vector<unsigned long long> hs(step_count), ht(task_count), hl(tail_count);
    cudaMemcpy(hs.data(), steps, step_count * 8, cudaMemcpyDeviceToHost);
    cudaMemcpy(ht.data(), tasks, task_count * 8, cudaMemcpyDeviceToHost);
    cudaMemcpy(hl.data(), tail, tail_count * 8, cudaMemcpyDeviceToHost);
    auto sat = [&](int b, int c, int s, int m) -> long long { return (long long)hs[((size_t(b) * CONSUMERS + c) * MAX_STEPS + s) * step_marks + m]; };
    auto tat = [&](int b, int c, int t, int m) -> long long { return (long long)ht[((size_t(b) * CONSUMERS + c) * MAX_TASKS + t) * task_marks + m]; };
    auto lat = [&](int b, int c, int m) -> long long { return (long long)hl[(size_t(b) * CONSUMERS + c) * tail_marks + m]; };

    for (int c = 0; c < CONSUMERS; c++) {
        // Per kind of step: cycles inside the step, and the wait before it (from the previous step's end; the first
        // step of each task is left out of the wait, its gap being setup).
        for (int kind = 0; kind < 2; kind++) {
            double inside = 0, wait = 0;
            long long count = 0, waits = 0;
            for (int b = 0; b < sms; b++) {
                std::vector<bool> task_start(MAX_STEPS, false);
                for (int t = 0; t < MAX_TASKS && tat(b, c, t, setup_in); t++)
                    if (tat(b, c, t, first_step) < MAX_STEPS) task_start[tat(b, c, t, first_step)] = true;
                for (int s = 0; s < MAX_STEPS && sat(b, c, s, step_out); s++) {
                    if (sat(b, c, s, step_with_dq) != kind) continue;
                    inside += sat(b, c, s, step_out) - sat(b, c, s, step_in);
                    count++;
                    if (s > 0 && !task_start[s]) {
                        wait += sat(b, c, s, step_in) - sat(b, c, s - 1, step_out);
                        waits++;
                    }
                }
            }
            if (count)
                std::printf("  consumer %d, steps %s dQ: %lld, %.0f cycles in the step, %.0f waiting before it\n", c,
                            kind ? "with" : "without", count, inside / count, waits ? wait / waits : 0.0);
        }
        double setup = 0, finish = 0, span = 0, after = 0;
        long long count = 0, blocks = 0;
        for (int b = 0; b < sms; b++) {
            int last = -1;
            for (int t = 0; t < MAX_TASKS && tat(b, c, t, finish_out); t++) last = t;
            for (int t = 0; t <= last; t++) {
                setup += tat(b, c, t, setup_out) - tat(b, c, t, setup_in);
                finish += tat(b, c, t, finish_out) - tat(b, c, t, finish_in);
                count++;
            }
            if (last >= 0) span += tat(b, c, last, finish_out) - tat(b, c, 0, setup_in);
            if (lat(b, c, after_out)) {
                after += lat(b, c, after_out) - lat(b, c, after_in);
                blocks++;
            }
        }
        if (count)
            std::printf("  consumer %d: %lld tasks, setup %.0f, finish %.0f, %.0f cycles per task in all; dQ conversion "
                        "after the last task %.0f cycles per block\n",
                        c, count, setup / count, finish / count, span / count, blocks ? after / blocks : 0.0);
    }
    for (void *b : buffers) cudaFree(b);
    return cudaGetLastError();
}

} // namespace

int main(int argc, char **argv) {
    const int d = argc > 1 ? std::atoi(argv[1]) : 128, causal = argc > 2 ? std::atoi(argv[2]) : 0;
    const int n = argc > 3 ? std::atoi(argv[3]) : 2048;
    const int batch = argc > 4 ? std::atoi(argv[4]) : (16384 / n > 0 ? 16384 / n : 1), heads = argc > 5 ? std::atoi(argv[5]) : 16;
    const cudaError_t e = with_head_dim(d, [&](auto dim) {
        constexpr int D = decltype(dim)::value;
        return causal ? run<D, true>(n, batch, heads) : run<D, false>(n, batch, heads);
    });
    if (e != cudaSuccess) std::printf("D = %d: %s\n", d, cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : 1;
}
