// The GEMM's persistent main loop: its own __global__, built from the library's ring pieces (shared_allocator,
// semaphores, ring_slot / ring_lap_parity, consumer_index, the warpgroup register budgets, launch_kernel).
//
// It runs LCSF's roles: one producer warpgroup whose first lane issues TMA loads into a ring of INPUT_STAGES
// stages, NUM_CONSUMERS consumer warpgroups that compute on them, one block per SM walking tasks blockIdx.x,
// blockIdx.x + gridDim.x, ... What it adds, and what only the GEMM needs:
//  * release lag: compute(i) leaves its wgmma group in flight, so stage i - 1 is handed back after compute(i) and
//    the task's last stage after drain();
//  * the next task is looked up while the current one computes (its integer divisions would otherwise sit between
//    one task's last wgmma and the next one's first);
//  * a deferred, piecewise store: finish() only converts a task's results in registers; their STORE_PIECES pieces
//    go out during the next task's first stages (gemm_store_schedule.cuh says which piece after which stage, and
//    how STORE_PHASES staggers the blocks), so the tensor cores keep working through the epilogue;
//  * a resident block (RESIDENT): operands kept in shared memory outside the ring across tasks that share them
//    (the B panel of a block column). A task that cannot use the block before it refills it, a part per stage on
//    that stage's semaphore; the producer first waits until every consumer has finished the last task that read
//    the old one (that reload is not overlapped: the task order makes it rare).
//
// A kernel K provides:
//   using globals; struct input_block, output_block, consumer_state, task (with `int iters`), resident_block;
//   static constexpr int NUM_CONSUMERS, INPUT_STAGES, PRODUCER_REGISTERS, CONSUMER_REGISTERS, STORE_PIECES,
//                        STORE_PHASES; static constexpr bool RESIDENT;
//   static bool get_task(const globals &, int id, task &);            false: no such task
//   static bool same_resident(const task &, const task &);            the second can use the first's resident block
//   static void prepare(const globals &);                 once per block at launch, before anything waits
//   static void before_loads(const globals &, const task &);   producer, once per task before its first stage
//   static void load(producer_args<K> &);                 issue TMA for stage `iter`; expect its bytes
//   static void setup(consumer_args<K> &);                once per task, before its first compute
//   static void compute(consumer_args<K> &);              issue stage `iter`'s wgmma; may leave it in flight
//   static void drain(consumer_args<K> &);                wait for the task's last wgmma
//   static void finish(consumer_args<K> &);               the task's results, ready to store, in registers
//   static void store(consumer_args<K> &, int first, int last);   pieces [first, last) of the finished task
// Tools instrument the kernel by wrapping these hooks (tools/profile/gemm_timeline.cu).
#pragma once

#include "kittens.cuh"
#include "gemm_store_schedule.cuh"

namespace tk_gemm {
using namespace kittens;

template <typename K> struct producer_args {
    const typename K::globals &g;
    typename K::input_block &input; // the stage to fill
    semaphore &arrived;             // expect this stage's bytes on it
    const typename K::task &task;
    int iter;                                 // stage index within the task
    typename K::resident_block *resident;     // RESIDENT only
    bool fill_resident;                       // this task (re)loads the resident block, a part per stage
};

template <typename K> struct consumer_args {
    const typename K::globals &g;
    typename K::input_block &input; // the stage to consume (valid in compute only)
    typename K::output_block &output;
    typename K::consumer_state &state;
    const typename K::task &task;
    int iter;                             // stage index within the task
    int consumer;                         // which consumer warpgroup, 0 .. NUM_CONSUMERS-1
    typename K::resident_block *resident; // RESIDENT only
};

// Dynamic shared memory: the ring, the resident block and the output block, each a whole number of 1 KB units
// (the dynamic array is declared 1 KB aligned, and the kernel checks that it is rather than reserving a margin).
template <typename K> constexpr int shared_bytes() {
    return int(sizeof(typename K::input_block) * K::INPUT_STAGES + (K::RESIDENT ? sizeof(typename K::resident_block) : 0) +
               sizeof(typename K::output_block));
}
// Static shared memory: the ring's semaphores, the resident block's and the kernel's own scalars, rounded up to the
// 1 KB alignment of the dynamic array that follows.
template <typename K> constexpr int static_shared_bytes() {
    return (int((2 * K::INPUT_STAGES + 2) * sizeof(semaphore)) + 1023) / 1024 * 1024;
}

// The producer's first lane: every stage of every task of this block, refilling the resident block (RESIDENT)
// where a task cannot use the one before it.
template <typename K>
__device__ inline void produce(const typename K::globals &g, typename K::input_block *inputs, semaphore *arrived,
                               semaphore *finished, typename K::resident_block *resident, semaphore &resident_free) {
    constexpr int STAGES = K::INPUT_STAGES;
    typename K::task task, last; // last: the task that loaded the resident block
    int ring = 0;  // stages issued so far, across tasks
    int loads = 0; // resident blocks loaded so far
    for (int id = blockIdx.x; K::get_task(g, id, task); id += gridDim.x) {
        bool fill = false;
        if constexpr (K::RESIDENT) {
            fill = loads == 0 || !K::same_resident(last, task);
            if (fill) {
                if (loads > 0) wait(resident_free, (loads - 1) & 1); // every consumer is done with the old one
                loads++;
                last = task;
            }
        }
        K::before_loads(g, task);
        for (int i = 0; i < task.iters; i++, ring++) {
            const int s = lcsf::ring_slot<STAGES>(ring);
            wait(finished[s], ((ring / STAGES) & 1) ^ 1); // the previous lap's phase: the first lap passes at once
            producer_args<K> a{g, inputs[s], arrived[s], task, i, resident, fill};
            K::load(a);
        }
    }
}

template <typename K>
__global__ __launch_bounds__(lcsf::num_threads<K>(), 1) void kernel(const __grid_constant__ typename K::globals g) {
    static_assert(K::NUM_CONSUMERS >= 1 && K::NUM_CONSUMERS <= 3, "the GEMM runs 1 to 3 consumer warpgroups");
    static_assert(K::INPUT_STAGES >= 1, "the GEMM needs at least one input stage");
    static_assert(shared_bytes<K>() + static_shared_bytes<K>() <= MAX_SHARED_MEMORY,
                  "GEMM: ring + resident block + output block + semaphores exceed 227 KB of shared memory");
    static_assert(!K::RESIDENT || sizeof(typename K::resident_block) % shared_allocator::ALIGN == 0 &&
                                      sizeof(typename K::input_block) % shared_allocator::ALIGN == 0,
                  "GEMM: the input and resident blocks must be whole 1 KB units (shared_bytes() leaves no padding)");
    constexpr int STAGES = K::INPUT_STAGES;
    constexpr int CONSUMER_WARPS = K::NUM_CONSUMERS * WARPGROUP_WARPS;

    extern __shared__ alignment_dummy shm[];
    if (smem_addr(shm) % shared_allocator::ALIGN != 0) __trap(); // shared_bytes() left no margin for realignment
    shared_allocator al(shm);
    typename K::input_block(&inputs)[STAGES] = al.allocate<typename K::input_block, STAGES>();
    typename K::resident_block *resident = nullptr;
    if constexpr (K::RESIDENT) resident = &al.allocate<typename K::resident_block>();
    typename K::output_block &output = al.allocate<typename K::output_block>();
    __shared__ semaphore arrived[STAGES], finished[STAGES];
    __shared__ semaphore resident_free; // RESIDENT only

    if (threadIdx.x == 0) {
        K::prepare(g);
        for (int s = 0; s < STAGES; s++) {
            init_semaphore(arrived[s], 1);               // the producer's expect is the one arrival
            init_semaphore(finished[s], CONSUMER_WARPS); // one arrival per consumer warp
        }
        if constexpr (K::RESIDENT) init_semaphore(resident_free, CONSUMER_WARPS);
    }
    __syncthreads();

    if (warpgroupid() == K::NUM_CONSUMERS) {
        warpgroup::decrease_registers<K::PRODUCER_REGISTERS>();
        if (warpgroup::warpid() == 0 && laneid() == 0) produce<K>(g, inputs, arrived, finished, resident, resident_free);
        return;
    }

    // A consumer warpgroup: setup, compute per stage and finish for each task of this block, with the previous task's
    // store spread over the current task's first stages. (Kept in the kernel's body rather than a function of its
    // own: ptxas then gets the code the tuned kernel was measured with.)
    warpgroup::increase_registers<K::CONSUMER_REGISTERS>();
    constexpr int PIECES = K::STORE_PIECES;
    typename K::task task;
    typename K::consumer_state state;
    const int consumer = lcsf::consumer_index();
    typename K::task previous; // the task whose deferred store is still due
    bool pending = false;
    int ring = 0;
    bool more = K::get_task(g, blockIdx.x, task);
    for (int id = blockIdx.x; more;) {
        typename K::task next;
        const int next_id = id + gridDim.x;
        consumer_args<K> a{g, inputs[0], output, state, task, 0, consumer, resident};
        consumer_args<K> prev{g, inputs[0], output, state, previous, 0, consumer, nullptr};
        K::setup(a);
        const bool has_next = K::get_task(g, next_id, next); // while this task's first wgmma runs
        for (int i = 0; i < task.iters; i++, ring++) {
            const int s = lcsf::ring_slot<STAGES>(ring);
            wait(arrived[s], lcsf::ring_lap_parity<STAGES>(ring));
            consumer_args<K> c{g, inputs[s], output, state, task, i, consumer, resident};
            K::compute(c);
            if (i > 0 && laneid() == 0) arrive(finished[lcsf::ring_slot<STAGES>(ring - 1)]); // release lag
            if (pending) { // the previous task's output goes out while this task's first stages compute
                int first, last;
                store_pieces_after<K>(i, task.iters, first, last);
                K::store(prev, first, last);
                if (last == PIECES) pending = false;
            }
        }
        if (task.iters > 0) {
            K::drain(a);
            if (laneid() == 0) arrive(finished[lcsf::ring_slot<STAGES>(ring - 1)]);
        }
        if constexpr (K::RESIDENT) { // after the drain: no wgmma reads the resident block any more
            if (has_next && !K::same_resident(task, next) && laneid() == 0) arrive(resident_free);
        }
        if (pending) K::store(prev, 0, PIECES); // a task with no stages
        K::finish(a);
        previous = task;
        pending = true;
        task = next;
        more = has_next;
        id = next_id;
    }
    if (pending) {
        consumer_args<K> prev{g, inputs[0], output, state, previous, 0, consumer, nullptr};
        K::store(prev, 0, PIECES);
    }
    tma::store_async_wait<0>(); // shared memory must outlive any TMA store still reading it
}

// Host side: K over `num_tasks` tasks, one block per SM at most.
template <typename K> inline cudaError_t launch(const typename K::globals &g, int num_tasks, cudaStream_t stream) {
    return lcsf::launch_kernel<K, kernel<K>, shared_bytes<K>()>(g, num_tasks, stream);
}

} // namespace tk_gemm
