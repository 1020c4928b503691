// Per-thread raw accesses (ops/warp/memory/raw.cuh): shared-memory words at every width, the 16-byte fill, and the
// handshake between two blocks (release_add by the block that wrote global data, acquire_load by the block that
// reads it), with plain stores and with TMA stores published through fence_async_global.
#include "harness.cuh"

using namespace kittens;

namespace {

constexpr int THREADS = 128;
constexpr int WORDS = 4; // per thread in the fill and word-order cases

// Thread t writes its N input words to its own 4 * N bytes of shared memory in one store, then reads the 4 * N bytes of
// thread t + 1 in one load (a neighbour's: the values went through shared memory, not through registers). One access
// per thread, so ptxas cannot merge neighbours: the SASS holds the width asked for (tests/cpu/test_sass.py).
//   out[t * N + k] = in[((t + 1) % THREADS) * N + k]
template <int N> __global__ void words_kernel(const uint32_t *in, uint32_t *out) {
    __shared__ alignas(16) uint32_t buffer[THREADS * N];
    const int t = threadIdx.x;
    uint32_t w[N];
    for (int k = 0; k < N; k++) w[k] = in[t * N + k];
    store_shared_words<N>(smem_addr(&buffer[t * N]), w);
    __syncthreads();
    uint32_t r[N];
    load_shared_words<N>(r, smem_addr(&buffer[((t + 1) % THREADS) * N]));
    for (int k = 0; k < N; k++) out[t * N + k] = r[k];
}
template <int N> int run_words(void **b, const long long *) {
    words_kernel<N><<<1, THREADS>>>(static_cast<const uint32_t *>(b[0]), static_cast<uint32_t *>(b[1]));
    return 0;
}

// Word order of the vector forms (word 0 at the lowest address): thread t writes its 4 words to its 16 bytes,
// STORE_N words per store, and reads its neighbour's 16 bytes LOAD_N words per load.
//   out[t * 4 + k] = in[((t + 1) % THREADS) * 4 + k]
template <int STORE_N, int LOAD_N> __global__ void order_kernel(const uint32_t *in, uint32_t *out) {
    __shared__ alignas(16) uint32_t buffer[THREADS * WORDS];
    const int t = threadIdx.x;
    for (int k = 0; k < WORDS; k += STORE_N) {
        uint32_t w[STORE_N];
        for (int j = 0; j < STORE_N; j++) w[j] = in[t * WORDS + k + j];
        store_shared_words<STORE_N>(smem_addr(&buffer[t * WORDS + k]), w);
    }
    __syncthreads();
    const int from = (t + 1) % THREADS;
    for (int k = 0; k < WORDS; k += LOAD_N) {
        uint32_t w[LOAD_N];
        load_shared_words<LOAD_N>(w, smem_addr(&buffer[from * WORDS + k]));
        for (int j = 0; j < LOAD_N; j++) out[t * WORDS + k + j] = w[j];
    }
}
template <int STORE_N, int LOAD_N> int run_order(void **b, const long long *) {
    order_kernel<STORE_N, LOAD_N><<<1, THREADS>>>(static_cast<const uint32_t *>(b[0]), static_cast<uint32_t *>(b[1]));
    return 0;
}

// Thread t fills its 16 bytes with in[t]; thread t then reads its neighbour's 16 bytes.
//   out[t * 4 + k] = in[(t + 1) % THREADS]
__global__ void fill_kernel(const uint32_t *in, uint32_t *out) {
    __shared__ alignas(16) uint32_t buffer[THREADS * WORDS];
    const int t = threadIdx.x;
    fill_shared_16(smem_addr(&buffer[t * WORDS]), in[t]);
    __syncthreads();
    uint32_t w[WORDS];
    load_shared_words<WORDS>(w, smem_addr(&buffer[((t + 1) % THREADS) * WORDS]));
    for (int k = 0; k < WORDS; k++) out[t * WORDS + k] = w[k];
}
int run_fill(void **b, const long long *) {
    fill_kernel<<<1, THREADS>>>(static_cast<const uint32_t *>(b[0]), static_cast<uint32_t *>(b[1]));
    return 0;
}

// ----- the handshake: block 0 produces `rounds` rounds of global data, block 1 consumes each -----
// Counters (zero at launch): ready = rounds published by block 0, done = rounds block 1 has finished reading (so
// block 0 may overwrite the data). Each side's thread 0 waits with a bounded spin, so a lost release ends the kernel
// with a timeout flag instead of hanging it; the grid is two small blocks, which any GPU runs at once.
// status (zero at launch): [0] rounds consumed, [1] wrong values read, [2] block 1 timed out, [3] block 0 timed out.
constexpr long long SPIN_CYCLES = 1ll << 31; // about a second: far beyond any wait of a correct run

// Thread 0 spins until *counter >= target; every thread of the block learns whether that happened in time.
__device__ bool wait_for(const int *counter, int target) {
    __shared__ int arrived;
    if (threadIdx.x == 0) {
        const long long start = clock64();
        int seen = acquire_load(counter);
        while (seen < target && clock64() - start < SPIN_CYCLES) seen = acquire_load(counter);
        arrived = seen >= target;
    }
    __syncthreads();
    const bool ok = arrived;
    __syncthreads(); // everyone has read `arrived` before the next wait writes it
    return ok;
}

// Element i of round r, exact in fp32.
__device__ int round_value(int r, int i) { return r * 4096 + i + 1; }

// The consumer's side, shared by both producers: wait for round r, check every element with plain loads, hand the
// buffer back.
template <typename T> __device__ void consume(const T *data, int n, int *counters, int *status, int rounds) {
    for (int r = 0; r < rounds; r++) {
        if (!wait_for(&counters[0], r + 1)) {
            if (threadIdx.x == 0) status[2] = 1;
            return;
        }
        int wrong = 0;
        for (int i = threadIdx.x; i < n; i += blockDim.x) wrong += data[i] != T(round_value(r, i));
        if (wrong) atomicAdd(&status[1], wrong);
        __syncthreads(); // every read of round r is done before the release below hands the buffer back
        if (threadIdx.x == 0) {
            status[0] = r + 1;
            release_add(&counters[1], 1);
        }
    }
}

// Block 0 writes each round with plain stores from every thread, then thread 0 publishes it.
__global__ void handshake_plain_kernel(int *data, int n, int *counters, int *status, int rounds) {
    if (blockIdx.x == 1) return consume(data, n, counters, status, rounds);
    for (int r = 0; r < rounds; r++) {
        if (!wait_for(&counters[1], r)) {
            if (threadIdx.x == 0) status[3] = 1;
            return;
        }
        for (int i = threadIdx.x; i < n; i += blockDim.x) data[i] = round_value(r, i);
        __syncthreads(); // every thread's stores precede thread 0's release
        if (threadIdx.x == 0) release_add(&counters[0], 1);
    }
}
int run_handshake_plain(void **b, const long long *a) {
    handshake_plain_kernel<<<2, THREADS>>>(static_cast<int *>(b[0]), int(a[0]), static_cast<int *>(b[1]),
                                           static_cast<int *>(b[2]), int(a[1]));
    return 0;
}

// Block 0 writes each round into a shared tile and stores it with TMA; thread 0 waits for the store to complete,
// orders the async proxy's writes before its release with fence_async_global, and publishes the round.
using handshake_tile = st_fl<32, 64>;
using handshake_gl = gl<float, 1, 1, -1, 64, handshake_tile>;
__global__ void handshake_tma_kernel(const __grid_constant__ handshake_gl dst, float *data, int *counters, int *status,
                                     int rounds) {
    constexpr int n = handshake_tile::num_elements;
    if (blockIdx.x == 1) return consume(data, n, counters, status, rounds);
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    handshake_tile &tile = al.allocate<handshake_tile>();
    for (int r = 0; r < rounds; r++) {
        if (!wait_for(&counters[1], r)) {
            if (threadIdx.x == 0) status[3] = 1;
            return;
        }
        for (int i = threadIdx.x; i < n; i += blockDim.x) tile(i / 64, i % 64) = float(round_value(r, i));
        tma::store_fence();
        __syncthreads();
        if (threadIdx.x == 0) {
            tma::store_async(dst, tile, {0, 0, 0, 0});
            tma::store_commit_group();
            tma::store_async_wait(); // the global writes are complete (and the tile free for the next round)
            fence_async_global();
            release_add(&counters[0], 1);
        }
    }
}
int run_handshake_tma(void **b, const long long *a) {
    float *data = static_cast<float *>(b[0]);
    handshake_gl dst(data, 1, 1, handshake_tile::rows, 64);
    constexpr int smem = shared_bytes_for<handshake_tile>();
    if (int e = tk_test::launch_status(handshake_tma_kernel, smem)) return e;
    handshake_tma_kernel<<<2, THREADS, smem>>>(dst, data, static_cast<int *>(b[1]), static_cast<int *>(b[2]),
                                               int(a[0]));
    return 0;
}

} // namespace

TK_TEST_REGISTER(mem_raw) {
    tk_test::add("raw/words/1", &run_words<1>);
    tk_test::add("raw/words/2", &run_words<2>);
    tk_test::add("raw/words/4", &run_words<4>);
    tk_test::add("raw/order/store1/load2", &run_order<1, 2>);
    tk_test::add("raw/order/store1/load4", &run_order<1, 4>);
    tk_test::add("raw/order/store2/load1", &run_order<2, 1>);
    tk_test::add("raw/order/store2/load4", &run_order<2, 4>);
    tk_test::add("raw/order/store4/load1", &run_order<4, 1>);
    tk_test::add("raw/order/store4/load2", &run_order<4, 2>);
    tk_test::add("raw/fill16", &run_fill);
    tk_test::add("raw/handshake/plain", &run_handshake_plain);
    tk_test::add("raw/handshake/tma", &run_handshake_tma);
}
