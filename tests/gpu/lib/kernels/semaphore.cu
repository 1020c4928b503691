// Semaphore (mbarrier) behaviour: phase completion and parity, arrival counts, producer /
// consumer hand-off over many phases, and byte-counted completion by TMA loads.
#include "harness.cuh"

using namespace kittens;

namespace {

// Records what test_wait reports at each step of two phases of a 2-arrival barrier.
//   out[0]  phase 0 before any arrival        -> 0
//   out[1]  phase 0 after 1 of 2 arrivals     -> 0
//   out[2]  phase 0 after 2 of 2 arrivals     -> 1
//   out[3]  phase 1 right after phase 0 ended -> 0
//   out[4]  phase 1 after one arrive(count=2) -> 1
//   out[5]  parity 0 now names phase 2        -> 0
//   out[6]  a blocking wait on parity 1 (complete) returned -> 1
__global__ void phases_kernel(int *out) {
    __shared__ semaphore bar;
    const bool leader = threadIdx.x % WARP_THREADS == 0;
    if (threadIdx.x == 0) init_semaphore(bar, 2);
    __syncthreads();
    if (threadIdx.x == 0) out[0] = test_wait(bar, 0);
    __syncthreads();
    if (leader && warpid() == 0) arrive(bar);
    __syncthreads();
    if (threadIdx.x == 0) out[1] = test_wait(bar, 0);
    __syncthreads();
    if (leader && warpid() == 1) arrive(bar);
    __syncthreads();
    if (threadIdx.x == 0) {
        out[2] = test_wait(bar, 0);
        out[3] = test_wait(bar, 1);
        arrive(bar, 2);
        out[4] = test_wait(bar, 1);
        out[5] = test_wait(bar, 0);
        wait(bar, 1);
        out[6] = 1;
    }
}
int run_phases(void **b, const long long *) {
    phases_kernel<<<1, 64>>>(static_cast<int *>(b[0]));
    return 0;
}

// Warp 0 produces one value per round into a single shared slot; all 32 lanes of warp 1 consume
// it. `full` completes when the producer arrives, `empty` when all 32 consumer lanes have. Any
// mistake in parity tracking either deadlocks (caught by the test's timeout) or reads a stale or
// future value. out[round * 32 + lane] = what that lane read.
__global__ void pingpong_kernel(int *out, int rounds) {
    __shared__ semaphore full, empty;
    __shared__ int slot;
    if (threadIdx.x == 0) {
        init_semaphore(full, 1);
        init_semaphore(empty, WARP_THREADS);
    }
    __syncthreads();
    if (warpid() == 0) {
        if (laneid() == 0) {
            for (int i = 0; i < rounds; i++) {
                if (i > 0) wait(empty, (i - 1) & 1);
                slot = 7 * i + 1;
                arrive(full);
            }
        }
    } else {
        for (int i = 0; i < rounds; i++) {
            wait(full, i & 1);
            out[i * WARP_THREADS + laneid()] = slot;
            arrive(empty);
        }
    }
}
int run_pingpong(void **b, const long long *a) {
    pingpong_kernel<<<1, 64>>>(static_cast<int *>(b[0]), int(a[0]));
    return 0;
}

// A semaphore reused across phases by TMA: tile i of a (rows x 64) bf16 tensor is loaded into
// the same shared tile on phase i (parity i & 1), together with a vector, then copied out.
// Phase 0 is armed through init_semaphore's tx_bytes and an explicit arrive; later phases use
// tma::expect over both types. out_tiles[i] = tile i, out_vecs[i] = row i of the tensor.
using phase_tile = st_bf<32, 64>;
using phase_vec = sv_bf<64>;
using phase_gl = gl<bf16, 1, 1, -1, 64, phase_tile, phase_vec>;
__global__ void tma_phases_kernel(const __grid_constant__ phase_gl src, bf16 *out_tiles, bf16 *out_vecs, int n_tiles) {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    phase_tile &t = al.allocate<phase_tile>();
    phase_vec &v = al.allocate<phase_vec>();
    semaphore &bar = al.allocate<semaphore>();
    constexpr uint32_t bytes = tma::transfer_bytes<phase_tile>::value + tma::transfer_bytes<phase_vec>::value;
    if (threadIdx.x == 0) init_semaphore(bar, 1, bytes);
    __syncthreads();
    for (int i = 0; i < n_tiles; i++) {
        if (threadIdx.x == 0) {
            if (i == 0) arrive(bar); // phase 0's bytes were expected at init
            else tma::expect<phase_tile, phase_vec>(bar);
            tma::load_async(t, src, {0, 0, i, 0}, bar);
            tma::load_async(v, src, {0, 0, i, 0}, bar);
        }
        wait(bar, i & 1);
        for (int e = threadIdx.x; e < phase_tile::num_elements; e += blockDim.x)
            out_tiles[int64_t(i) * phase_tile::num_elements + e] = t(e / 64, e % 64);
        for (int e = threadIdx.x; e < 64; e += blockDim.x) out_vecs[i * 64 + e] = v[e];
        __syncthreads(); // everyone has read the buffers before the next load overwrites them
    }
}
int run_tma_phases(void **b, const long long *a) {
    const int n = int(a[0]);
    phase_gl src(static_cast<bf16 *>(b[0]), 1, 1, n * 32, 64);
    constexpr int smem = shared_bytes_for<phase_tile, phase_vec, semaphore>();
    tma_phases_kernel<<<1, 128, smem>>>(src, static_cast<bf16 *>(b[1]), static_cast<bf16 *>(b[2]), n);
    return 0;
}

} // namespace

TK_TEST_REGISTER(semaphore) {
    tk_test::add("semaphore/phases", &run_phases);
    tk_test::add("semaphore/pingpong", &run_pingpong);
    tk_test::add("semaphore/tma_phases", &run_tma_phases);
}
