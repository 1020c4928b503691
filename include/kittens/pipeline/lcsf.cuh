// LCSF: the load-compute-store-finish block template.
//
// A kernel describes WHAT to move and compute; the template owns HOW it overlaps:
//  * one producer warpgroup (registers trimmed to PRODUCER_REGISTERS) whose first lane issues TMA loads
//    into an INPUT_STAGES-deep ring of `input_block`s in shared memory;
//  * NUM_CONSUMERS consumer warpgroups (registers raised to CONSUMER_REGISTERS) that wait for a stage,
//    compute on it, and hand it back;
//  * a persistent grid: one block per SM walks tasks blockIdx.x, blockIdx.x + gridDim.x, ... (static), or
//    draws them from a counter (dynamic); the kernel's `get_task` maps a task id to work in whatever
//    (L2-friendly) order it likes;
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
// and optionally, to balance tasks of uneven length:
//   static constexpr bool DYNAMIC_TASKS = true;         a block's first task is still blockIdx.x, later ones are
//   globals::task_counter (int*: 2 ints, zero at launch) drawn from this counter (gridDim.x + n for the n-th draw),
//                                                       so a block that drew short tasks draws more. Ids are drawn
//                                                       in increasing order: get_task's order is then the order in
//                                                       which tasks start. The producer looks each drawn task up
//                                                       and hands it over, and every hook of a task sees the
//                                                       block's next task as `next` (if has_next). The kernel
//                                                       leaves both ints zero again, so a caller can keep one
//                                                       counter per stream and zero it once.
//
// The pieces compose: a kernel that needs more than these hooks (work after its last task, say) writes its own
// __global__ from `block<K>` (allocate and initialise the ring, then the producer and consumer roles) and launches
// it with `launch_kernel<K, its_kernel, shared_bytes<K>()>`. A kernel whose main loop differs (an epilogue interleaved with the next task's
// stages) keeps that loop in its family's folder, built from the same ring, roles and launch.
#pragma once

#include <type_traits>

#include "../common/common.cuh"
#include "../common/shared_opt_in.cuh"
#include "../types/types.cuh"
#include "../ops/ops.cuh"

namespace kittens {
namespace lcsf {

template <typename K> struct producer_args {
    const typename K::globals &g;
    typename K::input_block &input; // the stage to fill
    semaphore &arrived;             // expect this stage's bytes on it
    const typename K::task &task;
    int iter; // stage index within the task
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
    const typename K::task &next; // that task, looked up (DYNAMIC_TASKS only: otherwise unset)
    bool has_next;                // whether `next` holds it
};

template <typename K> constexpr bool dynamic_tasks() {
    if constexpr (requires { K::DYNAMIC_TASKS; }) return K::DYNAMIC_TASKS;
    else return false;
}

template <typename K> constexpr int num_threads() { return (K::NUM_CONSUMERS + 1) * WARPGROUP_THREADS; }

// Where ring stage `n` (counted across tasks) sits, and the mbarrier phase of its current lap.
template <int STAGES> __device__ inline int ring_slot(int n) { return n % STAGES; }
template <int STAGES> __device__ inline int ring_lap_parity(int n) { return (n / STAGES) & 1; }

// A block's tasks after its first, handed from the producer (which draws them) to the consumers. Publication n
// (the block's task n + 1) goes through slot n % 2: the producer draws the id and looks the task up when it starts
// loading task n; the consumers copy it when they set task n up. The producer is otherwise idle, so the lookup
// (integer divisions) stays off the consumers' path between tasks.
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

// Dynamic shared memory: the ring and the output block. The dynamic array is declared 1 KB aligned (the 128-byte
// swizzle's period), and the static part before it is rounded up to that alignment, so nothing is skipped; the
// kernel checks this at start rather than reserving a 1 KB margin, which would cost the largest kernels a tile.
template <typename K> constexpr int shared_bytes() {
    return int(sizeof(typename K::input_block) * K::INPUT_STAGES + sizeof(typename K::output_block));
}
// Static shared memory: the ring's semaphores and the task queue; ptxas rounds the static part up to the 1 KB
// alignment of the dynamic array that follows it.
template <typename K> constexpr int static_shared_bytes() {
    return (int((2 * K::INPUT_STAGES + 2) * sizeof(semaphore) + sizeof(task_queue<K>)) + 1023) / 1024 * 1024;
}

// The consumers' side of a block: the index broadcast from lane 0, so that ptxas knows it is warp-uniform; branches
// on it (and on the task, whose id is broadcast likewise) then stay uniform and the wgmma descriptors that depend
// on them live in uniform registers.
__device__ inline int consumer_index() { return __shfl_sync(0xffffffffu, warpgroupid(), 0); }

// One block's shared resources (the ring, the output block, the task queue) and its two roles. Built by every
// thread at kernel entry: thread 0 initialises the semaphores, and the constructor ends with a block barrier.
template <typename K> struct block {
    static constexpr int STAGES = K::INPUT_STAGES;
    static constexpr int CONSUMER_WARPS = K::NUM_CONSUMERS * WARPGROUP_WARPS;
    static constexpr bool DYNAMIC = dynamic_tasks<K>();
    static_assert(K::NUM_CONSUMERS >= 1 && K::NUM_CONSUMERS <= 3, "LCSF runs 1 to 3 consumer warpgroups");
    static_assert(K::INPUT_STAGES >= 1, "LCSF needs at least one input stage");
    // The launch fails unless static + dynamic shared memory fit the 227 KB a block may opt into.
    static_assert(shared_bytes<K>() + static_shared_bytes<K>() <= MAX_SHARED_MEMORY,
                  "LCSF: input ring + output block + semaphores exceed 227 KB of shared memory");

    const typename K::globals &g;
    typename K::input_block *inputs; // [STAGES]
    typename K::output_block &output;
    semaphore *arrived, *finished; // [STAGES] each
    task_queue<K> &queue;          // DYNAMIC only

    __device__ inline block(const typename K::globals &g_, shared_allocator al, semaphore *arrived_, semaphore *finished_,
                            task_queue<K> &queue_)
        : g(g_), inputs(al.allocate<typename K::input_block, STAGES>()), output(al.allocate<typename K::output_block>()),
          arrived(arrived_), finished(finished_), queue(queue_) {
        if (threadIdx.x == 0) {
            for (int s = 0; s < STAGES; s++) {
                init_semaphore(arrived[s], 1);               // the producer's expect is the one arrival
                init_semaphore(finished[s], CONSUMER_WARPS); // one arrival per consumer warp
            }
            if constexpr (DYNAMIC) queue.init(CONSUMER_WARPS);
        }
        __syncthreads();
    }

    __device__ inline static bool is_producer() { return warpgroupid() == K::NUM_CONSUMERS; }

    // The producer warpgroup: trims its registers, then its first lane loads every stage of every task.
    __device__ inline void produce() {
        warpgroup::decrease_registers<K::PRODUCER_REGISTERS>();
        if (warpgroup::warpid() != 0 || laneid() != 0) return;
        typename K::task task;
        int ring = 0; // stages issued so far, across tasks
        auto load_stages = [&](const typename K::task &t) {
            for (int i = 0; i < t.iters; i++, ring++) {
                const int s = ring_slot<STAGES>(ring);
                wait(finished[s], ring_lap_parity<STAGES>(ring) ^ 1); // the first lap passes at once
                producer_args<K> a{g, inputs[s], arrived[s], t, i};
                K::load(a);
            }
        };
        if constexpr (DYNAMIC) {
            bool more = K::get_task(g, blockIdx.x, task);
            for (int n = 0; more; n++) {
                const bool has_next = queue.publish(g, n, atomicAdd(g.task_counter, 1) + int(gridDim.x));
                load_stages(task);
                more = has_next;
                if (more) task = queue.published(n);
            }
            // The last block to stop drawing puts the counter back to zero for the next launch: by then every block
            // has drawn past the last task, so nothing in this launch reads it again.
            __threadfence();
            if (atomicAdd(g.task_counter + 1, 1) == int(gridDim.x) - 1) {
                g.task_counter[0] = 0;
                g.task_counter[1] = 0;
            }
        } else {
            for (int id = blockIdx.x; K::get_task(g, id, task); id += gridDim.x) load_stages(task);
        }
    }

    // A consumer warpgroup: raises its registers, runs setup / compute per stage / finish for each of the block's
    // tasks, and returns once its TMA stores have completed (shared memory must outlive them). `state` is left as
    // the last finish left it, and `task` as the last lookup left it.
    __device__ inline void consume(typename K::consumer_state &state, typename K::task &task) {
        warpgroup::increase_registers<K::CONSUMER_REGISTERS>();
        const int consumer = consumer_index();
        int ring = 0;
        bool more = K::get_task(g, blockIdx.x, task);
        for (int id = blockIdx.x, n = 0; more; n++) {
            typename K::task next;
            bool has_next = false;
            int next_id;
            if constexpr (DYNAMIC) next_id = queue.read(n, next, has_next);
            else next_id = id + gridDim.x;
            consumer_args<K> a{g, inputs[0], output, state, task, 0, consumer, next_id, next, has_next};
            K::setup(a);
            for (int i = 0; i < task.iters; i++, ring++) {
                const int s = ring_slot<STAGES>(ring);
                wait(arrived[s], ring_lap_parity<STAGES>(ring));
                consumer_args<K> c{g, inputs[s], output, state, task, i, consumer, next_id, next, has_next};
                K::compute(c);
                if (laneid() == 0) arrive(finished[s]);
            }
            K::finish(a);
            if constexpr (DYNAMIC) {
                task = next;
                more = has_next;
            } else {
                more = K::get_task(g, next_id, task);
            }
            id = next_id;
        }
        tma::store_async_wait<0>(); // shared memory must outlive any TMA store still reading it
    }
};

// Every thread at kernel entry: the block's resources. The dynamic array is checked to start 1 KB aligned
// (shared_bytes() leaves no margin for realignment).
template <typename K> __device__ inline block<K> make_block(const typename K::globals &g) {
    extern __shared__ alignment_dummy shm[];
    if (smem_addr(shm) % shared_allocator::ALIGN != 0) __trap();
    __shared__ semaphore arrived[K::INPUT_STAGES], finished[K::INPUT_STAGES];
    __shared__ task_queue<K> queue;
    return block<K>(g, shared_allocator(shm), arrived, finished, queue);
}

template <typename K>
__global__ __launch_bounds__(num_threads<K>(), 1) void kernel(const __grid_constant__ typename K::globals g) {
    block<K> b = make_block<K>(g);
    if (b.is_producer()) {
        b.produce();
    } else {
        typename K::consumer_state state;
        typename K::task last;
        b.consume(state, last);
    }
}

// Host side: launch KERNEL (a __global__ taking K::globals, built from block<K>) over `num_tasks` tasks with a
// persistent grid of at most one block per SM of the current device, with SMEM bytes of dynamic shared memory.
template <typename K, auto KERNEL, int SMEM>
inline cudaError_t launch_kernel(const typename K::globals &g, int num_tasks, cudaStream_t stream) {
    int dev = 0, sms = 0;
    if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev); e != cudaSuccess) return e;
    if (cudaError_t e = opt_in_shared<KERNEL>(dev, SMEM); e != cudaSuccess) return e;
    if (num_tasks <= 0) return cudaSuccess;
    int grid = num_tasks < sms ? num_tasks : sms;
    KERNEL<<<grid, num_threads<K>(), SMEM, stream>>>(g);
    return cudaGetLastError();
}

// The template's own kernel.
template <typename K> inline cudaError_t launch(const typename K::globals &g, int num_tasks, cudaStream_t stream) {
    return launch_kernel<K, kernel<K>, shared_bytes<K>()>(g, num_tasks, stream);
}

} // namespace lcsf
} // namespace kittens
