// LCSF: the load-compute-store-finish block template.
//
// A kernel describes WHAT to move and compute; the template owns HOW it overlaps:
//  * one producer warpgroup (registers trimmed to PRODUCER_REGISTERS) whose first lane issues TMA loads
//    into an INPUT_STAGES-deep ring of `input_block`s in shared memory;
//  * NUM_CONSUMERS consumer warpgroups (registers raised to CONSUMER_REGISTERS) that wait for a stage,
//    compute on it, and hand it back;
//  * a persistent grid: one block per SM walks tasks blockIdx.x, blockIdx.x + gridDim.x, ...; the kernel's
//    `get_task` maps a task id to work in whatever (L2-friendly) order it likes;
//  * two mbarriers per stage: `arrived` (the TMA transaction count completes it) and `finished` (every
//    consumer warp arrives once it no longer reads the stage).
// The ring runs across task boundaries, so the producer prefetches the next task's first stages while the
// consumers are still in `finish` for the current one.
//
// A kernel K provides:
//   using globals;                          kernel argument (holds the gl's)
//   struct input_block;                     one ring stage (shared memory)
//   struct output_block;                    shared scratch owned by the consumers (may be empty)
//   struct consumer_state;                  per-consumer-warpgroup registers
//   struct task;                            with an `int iters` member: ring stages the task consumes
//   static constexpr int NUM_CONSUMERS, INPUT_STAGES, PRODUCER_REGISTERS, CONSUMER_REGISTERS;
//   static __device__ bool get_task(const globals&, int task_id, task&);   false: no such task
//   static __device__ void load(producer_args<K>&);      issue TMA for stage `iter`; expect its bytes
//   static __device__ void setup(consumer_args<K>&);     once per task, before the first compute
//   static __device__ void compute(consumer_args<K>&);   consume one stage; return when done reading it
//   static __device__ void finish(consumer_args<K>&);    once per task: write results out
// and optionally, to overlap a task's output with the next task's tensor-core work:
//   static constexpr int RELEASE_LAG = 1;               compute(i) may leave its reads of stage i in flight:
//                                                       the template hands back stage i-1 after compute(i),
//   static __device__ void drain(consumer_args<K>&);    and the last stage after drain() at the task's end;
//   static constexpr int STORE_PIECES = P;              the previous task's output goes out in P pieces
//   static __device__ void store(consumer_args<K>&,     (finish then only stashes results in registers):
//                                int first, int last);  pieces [first, last). A task with >= 2P stages takes
//                                                       one piece after each of its first P computes, a shorter
//                                                       one all P after its first compute, so the tensor cores
//                                                       keep working through the epilogue; after the last task,
//                                                       all of them.
//   static constexpr int STORE_PHASES = F;              block x starts those pieces (x % F) / F of a task later,
//                                                       so that only 1 / F of the SMs write at once.
// and optionally, to balance tasks of uneven length:
//   static constexpr bool DYNAMIC_TASKS = true;         a block's first task is still blockIdx.x, later ones are
//   globals::task_counter (int*, zero at launch)         drawn from this counter (gridDim.x + n for the n-th draw),
//                                                       so a block that drew short tasks draws more. Ids are drawn
//                                                       in increasing order: get_task's order is then the order in
//                                                       which tasks start, and nothing needs to balance rounds.
//                                                       The producer looks each drawn task up and hands it over.
// and optionally, for operands a block keeps across several tasks (the B panel of a short-K GEMM, loaded once per
// column of output blocks instead of once per task, which leaves the ring two thirds fewer bytes to stream):
//   struct resident_block;                              shared memory outside the ring (hooks see p.resident,
//                                                       c.resident)
//   static __device__ bool same_resident(const task &a, const task &b);  b can use what was loaded for a
//                                                       (an equivalence: the same panel, say)
//                                                       A task that cannot use the block before it has
//                                                       p.fill_resident set in load(): stage i then also loads
//                                                       the block's part for stage i, on the same semaphore, so
//                                                       compute(i) may read that part once the stage has arrived.
//                                                       The producer waits first until every consumer has
//                                                       finished the last task that read the old block (that
//                                                       reload is not overlapped: order tasks so it is rare).
// and optionally
//   static __device__ void prepare(const globals&);     called once per block at launch, before anything waits (e.g. to
//                                                       prefetch tensor maps)
//   static __device__ void before_loads(const globals&, const task&);  called by the producer once per task, before
//                                                       it waits for the task's first stage (e.g. to warm L2 for
//                                                       later tasks; kept out of load(), whose loop stays small)
//   static __device__ void after_tasks(consumer_args<K>&);  called by each consumer warpgroup once its block has no
//                                                       task left, after its TMA stores have completed (e.g. to
//                                                       take on work that other blocks' tasks leave behind);
//                                                       it sees `state` as the last finish left it (its `task` is
//                                                       no task: keep in the state what it needs to know)
// Either way each hook sees `next_id`, the id of the task this block runs after the current one (get_task says
// whether it exists), so a kernel can prefetch for it. With
//   static constexpr bool LOOKUP_NEXT_EARLY = true;     the template looks that task up once, before setup, and
//                                                       every hook of the task sees it as `next` (if has_next);
//                                                       always so with DYNAMIC_TASKS, where it costs nothing.
#pragma once

#include <atomic>
#include <type_traits>

#include "../common/common.cuh"
#include "../types/types.cuh"
#include "../ops/ops.cuh"

namespace kittens {
namespace lcsf {

template <typename K> constexpr bool has_resident() { return requires { typename K::resident_block; }; }
struct no_resident {};
template <typename K> struct resident_of { using type = no_resident; };
template <typename K>
    requires requires { typename K::resident_block; }
struct resident_of<K> {
    using type = typename K::resident_block;
};

template <typename K> struct producer_args {
    const typename K::globals &g;
    typename K::input_block &input; // the stage to fill
    semaphore &arrived;             // expect this stage's bytes on it
    const typename K::task &task;
    int iter; // stage index within the task
    typename resident_of<K>::type *resident = nullptr; // the resident block (kernels that have one)
    bool fill_resident = false;                        // this task (re)loads it, a part per stage
};

template <typename K> struct consumer_args {
    const typename K::globals &g;
    typename K::input_block &input; // the stage to consume (valid in compute only)
    typename K::output_block &output;
    typename K::consumer_state &state;
    const typename K::task &task;
    int iter;     // stage index within the task
    int consumer; // which consumer warpgroup, 0 .. NUM_CONSUMERS-1
    int next_id;  // this block's next task (it exists iff K::get_task accepts the id)
    const typename K::task &next; // that task, looked up (LOOKUP_NEXT_EARLY or DYNAMIC_TASKS: otherwise unset)
    bool has_next;                // whether `next` holds it
    typename resident_of<K>::type *resident = nullptr; // the task's resident block (kernels that have one)
};

template <typename K> constexpr int release_lag() {
    if constexpr (requires { K::RELEASE_LAG; }) return K::RELEASE_LAG;
    else return 0;
}
template <typename K> constexpr bool lookup_next_early() {
    if constexpr (requires { K::LOOKUP_NEXT_EARLY; }) return K::LOOKUP_NEXT_EARLY;
    else return false;
}
template <typename K> constexpr bool dynamic_tasks() {
    if constexpr (requires { K::DYNAMIC_TASKS; }) return K::DYNAMIC_TASKS;
    else return false;
}

// A block's tasks after its first, handed from the producer (which draws them) to the consumers. Publication n
// (the block's task n + 1) goes through slot n % 2: the producer draws the id and looks the task up when it starts
// loading task n; the consumers copy it when they set task n up. The producer is otherwise idle, so the lookup
// (integer divisions) is off the consumers' path between tasks (attention forward, H100: see the perf notes).
template <typename K> struct task_queue {
    using task_t = typename K::task;
    static_assert(sizeof(task_t) % sizeof(int) == 0 && std::is_trivially_copyable_v<task_t>,
                  "LCSF DYNAMIC_TASKS: the task struct is copied between warps as ints");
    task_t tasks[2];
    int ids[2], valid[2];
    semaphore full[2], empty[2];
    __device__ inline void init(int consumer_warps) {
        for (int s = 0; s < 2; s++) {
            init_semaphore(full[s], 1);
            init_semaphore(empty[s], consumer_warps);
        }
    }
    // One producer thread: look task `id` up and publish it as publication n. Returns whether the task exists;
    // the task itself stays readable in the slot (`published`) until publication n + 2.
    __device__ inline bool publish(const typename K::globals &g, int n, int id) {
        const int s = n & 1;
        wait(empty[s], ((n >> 1) & 1) ^ 1); // the first use of each slot passes at once
        ids[s] = id;
        valid[s] = K::get_task(g, id, tasks[s]);
        arrive(full[s]); // release: the slot is visible to whoever acquires this phase
        return valid[s];
    }
    __device__ inline const task_t &published(int n) const { return tasks[n & 1]; }
    // Every thread of a consumer warp: copy publication n, then hand its slot back. Each word goes through a
    // shuffle from lane 0 so that ptxas sees the id and the task as warp-uniform (see the consumer index).
    __device__ inline int read(int n, task_t &t, bool &exists) {
        const int s = n & 1;
        wait(full[s], (n >> 1) & 1);
        const int id = __shfl_sync(0xffffffffu, ids[s], 0);
        exists = __shfl_sync(0xffffffffu, valid[s], 0) != 0;
        const int *src = reinterpret_cast<const int *>(&tasks[s]);
        int *dst = reinterpret_cast<int *>(&t);
#pragma unroll
        for (int i = 0; i < int(sizeof(task_t) / sizeof(int)); i++) dst[i] = __shfl_sync(0xffffffffu, src[i], 0);
        __syncwarp();
        if (laneid() == 0) arrive(empty[s]);
        return id;
    }
};

template <typename K> constexpr bool has_deferred_store() {
    return requires(consumer_args<K> &a) { K::store(a, 0, 1); };
}

// The store pieces that follow compute(i) of a task with `iters` stages: [first, last). Spreading them only
// pays when the task has stages to spare: with every stage followed by a piece, each stage waits for one
// (GEMM, H100: 4096x4096x512 27.6 us spread vs 28.5 all at once, 4096x4096x1024 47.0 vs 48.4; but
// 8192x8192x256, 4 stages for 4 pieces, 67.1 vs 62.5).
template <typename K> constexpr int store_phases() {
    if constexpr (requires { K::STORE_PHASES; }) return K::STORE_PHASES;
    else return 1;
}
template <typename K> __device__ inline void store_pieces_after(int i, int iters, int &first, int &last) {
    constexpr int P = K::STORE_PIECES, PHASES = store_phases<K>();
    const int phase = PHASES > 1 ? int(blockIdx.x % PHASES) : 0;
    if (iters >= 2 * P) {
        const int j = i - phase * (iters - P) / PHASES;
        first = j >= 0 && j < P ? j : P;
        last = j < 0 ? 0 : j < P ? j + 1 : P;
    } else {
        const int start = phase * iters / PHASES;
        first = i == start ? 0 : P;
        last = i >= start ? P : 0;
    }
}

template <typename K> constexpr int num_threads() { return (K::NUM_CONSUMERS + 1) * WARPGROUP_THREADS; }

// Dynamic shared memory: the ring and the output block. The dynamic array is declared 1 KB aligned (the 128-byte
// swizzle's period), and the static part before it is rounded up to that alignment, so nothing is skipped; the
// kernel checks this at start rather than reserving a 1 KB margin, which the attention backward needs for tiles.
template <typename K> constexpr int resident_bytes() {
    if constexpr (has_resident<K>()) return int(sizeof(typename K::resident_block));
    else return 0;
}
template <typename K> constexpr int shared_bytes() {
    return int(sizeof(typename K::input_block) * K::INPUT_STAGES + resident_bytes<K>() + sizeof(typename K::output_block));
}
// Static shared memory: the kernel's semaphores and task queue, declared below; ptxas rounds the static part up to
// the 1 KB alignment of the dynamic array that follows it.
template <typename K> constexpr int static_shared_bytes() {
    return (int((2 * K::INPUT_STAGES + 2) * sizeof(semaphore) + sizeof(task_queue<K>)) + 1023) / 1024 * 1024;
}

template <typename K>
__global__ __launch_bounds__(num_threads<K>(), 1) void kernel(const __grid_constant__ typename K::globals g) {
    static_assert(K::NUM_CONSUMERS >= 1 && K::NUM_CONSUMERS <= 3, "LCSF runs 1 to 3 consumer warpgroups");
    static_assert(K::INPUT_STAGES >= 1, "LCSF needs at least one input stage");
    // The launch fails unless static + dynamic shared memory fit the 227 KB a block may opt into.
    static_assert(shared_bytes<K>() + static_shared_bytes<K>() <= MAX_SHARED_MEMORY,
                  "LCSF: input ring + output block + semaphores exceed 227 KB of shared memory");
    constexpr int STAGES = K::INPUT_STAGES;
    constexpr int CONSUMER_WARPS = K::NUM_CONSUMERS * WARPGROUP_WARPS;

    extern __shared__ alignment_dummy shm[];
    if (smem_addr(shm) % shared_allocator::ALIGN != 0) __trap(); // shared_bytes() left no margin for realignment
    shared_allocator al(shm);
    typename K::input_block(&inputs)[STAGES] = al.allocate<typename K::input_block, STAGES>();
    constexpr bool RESIDENT = has_resident<K>();
    using resident_t = typename resident_of<K>::type;
    static_assert(!RESIDENT || sizeof(resident_t) % shared_allocator::ALIGN == 0 && sizeof(typename K::input_block) % shared_allocator::ALIGN == 0,
                  "LCSF: the input and resident blocks must be whole 1 KB units (shared_bytes() leaves no padding)");
    resident_t *resident = nullptr;
    if constexpr (RESIDENT) resident = &al.allocate<resident_t>();
    typename K::output_block &output = al.allocate<typename K::output_block>();
    __shared__ semaphore arrived[STAGES], finished[STAGES];
    __shared__ semaphore resident_free; // used with RESIDENT only
    __shared__ task_queue<K> queue; // used with QUEUE only
    constexpr bool DYNAMIC = dynamic_tasks<K>();
    // With the dynamic schedule the producer draws every next task, looks it up and hands it over through `queue`.
    // (The same hand-over for the static GEMM, whose consumers look the next task up during the current one, cost
    // 3-6% at K = 256: there the producer's extra work delays the next task's first loads.)
    constexpr bool QUEUE = DYNAMIC;

    if (threadIdx.x == 0) {
        if constexpr (requires { K::prepare(g); }) K::prepare(g);
        for (int s = 0; s < STAGES; s++) {
            init_semaphore(arrived[s], 1);              // the producer's expect is the one arrival
            init_semaphore(finished[s], CONSUMER_WARPS); // one arrival per consumer warp
        }
        if constexpr (QUEUE) queue.init(CONSUMER_WARPS);
        if constexpr (RESIDENT) init_semaphore(resident_free, CONSUMER_WARPS);
    }
    __syncthreads();

    typename K::task task;
    if (warpgroupid() == K::NUM_CONSUMERS) { // producer
        warpgroup::decrease_registers<K::PRODUCER_REGISTERS>();
        if (warpgroup::warpid() == 0 && laneid() == 0) {
            int ring = 0; // stages issued so far, across tasks
            int loads = 0; // resident blocks loaded so far
            typename K::task last;
            auto load_stages = [&](const typename K::task &t) {
                bool fill = false;
                if constexpr (RESIDENT) {
                    fill = loads == 0 || !K::same_resident(last, t);
                    if (fill) {
                        if (loads > 0) wait(resident_free, (loads - 1) & 1); // every consumer is done with the old one
                        loads++;
                        last = t;
                    }
                }
                if constexpr (requires { K::before_loads(g, t); }) K::before_loads(g, t);
                for (int i = 0; i < t.iters; i++, ring++) {
                    int s = ring % STAGES;
                    wait(finished[s], ((ring / STAGES) & 1) ^ 1); // first lap passes at once
                    producer_args<K> a{g, inputs[s], arrived[s], t, i, resident, fill};
                    K::load(a);
                }
            };
            if constexpr (QUEUE) {
                bool more = K::get_task(g, blockIdx.x, task);
                for (int n = 0; more; n++) {
                    const bool has_next = queue.publish(g, n, atomicAdd(g.task_counter, 1) + int(gridDim.x));
                    load_stages(task);
                    more = has_next;
                    if (more) task = queue.published(n);
                }
            } else {
                for (int id = blockIdx.x; K::get_task(g, id, task); id += gridDim.x) load_stages(task);
            }
        }
    } else { // consumers
        warpgroup::increase_registers<K::CONSUMER_REGISTERS>();
        constexpr int LAG = release_lag<K>();
        static_assert(LAG == 0 || LAG == 1, "LCSF: RELEASE_LAG is 0 or 1");
        typename K::consumer_state state;
        // Broadcast from lane 0: ptxas then knows the index is warp-uniform, so branches on it (and on the task, whose
        // id is broadcast likewise) stay uniform and the wgmma descriptors that depend on them live in uniform registers.
        const int consumer = __shfl_sync(0xffffffffu, warpgroupid(), 0);
        typename K::task previous; // the task whose deferred store is still due
        bool pending = false;
        int ring = 0;
        bool more = K::get_task(g, blockIdx.x, task);
        for (int id = blockIdx.x, n = 0; more; n++) {
            // Kernels that overlap their epilogue with the next task, or ask for it, look that task up during this
            // one, while tensor-core work runs: at the boundary its integer divisions sat between one task's last
            // wgmma and the next one's first (GEMM, H100: ~350 of ~7000 cycles per 4096x4096x256 task). Others
            // keep the registers (the attention backward spills with the lookup held across its loop). Where the
            // producer hands tasks over (QUEUE), it has looked the next one up already: it is copied, early or not.
            constexpr bool EARLY = lookup_next_early<K>() || QUEUE;
            typename K::task next;
            bool has_next = false;
            int next_id;
            if constexpr (QUEUE) {
                next_id = queue.read(n, next, has_next);
            } else {
                next_id = id + gridDim.x;
                if constexpr (EARLY) has_next = K::get_task(g, next_id, next);
            }
            const bool next_seen = EARLY && has_next;
            static_assert(!RESIDENT || EARLY || has_deferred_store<K>(), "LCSF RESIDENT needs the next task looked up early");
            consumer_args<K> a{g, inputs[0], output, state, task, 0, consumer, next_id, next, next_seen, resident};
            consumer_args<K> prev{g, inputs[0], output, state, previous, 0, consumer, next_id, next, false};
            K::setup(a);
            if constexpr (has_deferred_store<K>() && !EARLY) has_next = K::get_task(g, next_id, next);
            for (int i = 0; i < task.iters; i++, ring++) {
                int s = ring % STAGES;
                wait(arrived[s], (ring / STAGES) & 1);
                consumer_args<K> c{g, inputs[s], output, state, task, i, consumer, next_id, next, next_seen, resident};
                K::compute(c);
                if constexpr (LAG == 0) {
                    if (laneid() == 0) arrive(finished[s]);
                } else if (i > 0) {
                    if (laneid() == 0) arrive(finished[(ring - 1) % STAGES]);
                }
                if constexpr (has_deferred_store<K>()) {
                    if (pending) { // the previous task's output goes out while this task's first stages compute
                        int first, last;
                        store_pieces_after<K>(i, task.iters, first, last);
                        K::store(prev, first, last);
                        if (last == K::STORE_PIECES) pending = false;
                    }
                }
            }
            if constexpr (LAG == 1) {
                if (task.iters > 0) {
                    K::drain(a);
                    if (laneid() == 0) arrive(finished[(ring - 1) % STAGES]);
                }
            }
            if constexpr (RESIDENT) { // after the drain: no wgmma reads the resident block any more
                if (has_next && !K::same_resident(task, next) && laneid() == 0) arrive(resident_free);
            }
            if constexpr (has_deferred_store<K>()) {
                if (pending) K::store(prev, 0, K::STORE_PIECES); // a task with no stages
                K::finish(a);
                previous = task;
                pending = true;
            } else {
                K::finish(a);
            }
            if constexpr (has_deferred_store<K>() || EARLY) {
                task = next;
                more = has_next;
            } else {
                more = K::get_task(g, next_id, task);
            }
            id = next_id;
        }
        if constexpr (has_deferred_store<K>()) {
            if (pending) {
                consumer_args<K> prev{g, inputs[0], output, state, previous, 0, consumer, 0, previous, false};
                K::store(prev, 0, K::STORE_PIECES);
            }
        }
        tma::store_async_wait<0>(); // shared memory must outlive any TMA store still reading it
        if constexpr (requires(consumer_args<K> &a) { K::after_tasks(a); }) {
            consumer_args<K> a{g, inputs[0], output, state, task, 0, consumer, 0, task, false, resident};
            K::after_tasks(a);
        }
    }
}

// Host side: launch K over `num_tasks` tasks with a persistent grid of at most one block per SM of the
// current device. The shared-memory opt-in is made once per device the kernel runs on.
template <typename K> inline cudaError_t launch(const typename K::globals &g, int num_tasks, cudaStream_t stream) {
    int dev = 0, sms = 0;
    if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev); e != cudaSuccess) return e;
    constexpr int smem = shared_bytes<K>();
    static std::atomic<uint64_t> configured{0}; // one bit per device ordinal (< 64)
    const uint64_t bit = dev < 64 ? (uint64_t(1) << dev) : 0;
    if (!bit || !(configured.load(std::memory_order_acquire) & bit)) {
        cudaError_t e = cudaFuncSetAttribute(kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        configured.fetch_or(bit, std::memory_order_release);
    }
    if (num_tasks <= 0) return cudaSuccess;
    int grid = num_tasks < sms ? num_tasks : sms;
    kernel<K><<<grid, num_threads<K>(), smem, stream>>>(g);
    return cudaGetLastError();
}

} // namespace lcsf
} // namespace kittens
