// The asynchronous layer end to end: a small pipelined GEMM C = A @ B^T (bf16 in, fp32 out).
//   * warpgroup 0 is the producer: it shrinks its registers (setmaxnreg) and one thread streams
//     K tiles of A and B through a STAGES-deep ring of shared tiles with TMA, each stage guarded
//     by a `full` semaphore (bytes landed) and an `empty` one (all consumer warps done with it);
//   * warpgroups 1 and 2 are consumers: they grow their registers, run wgmma on tiles exactly as
//     TMA wrote them (so TMA and wgmma must agree on the swizzle), and finally store their 64-row
//     slab of C through a shared fp32 tile and a TMA store, which clips the ragged edges.
// Ragged M, N, K work because TMA zero-fills the out-of-range parts of A and B.
#include "harness.cuh"

using namespace kittens;

namespace {

constexpr int BM = 128, BN = 128, BK = 64, STAGES = 3, CONSUMERS = 2;
using a_tile = st_bf<BM / CONSUMERS, BK>; // one consumer's 64 rows of A
using b_tile = st_bf<BN, BK>;             // N x K, K-major: the mma_ABt operand
using c_tile = st_fl<BM / CONSUMERS, BN>;
using a_gl = gl<bf16, 1, 1, -1, -1, a_tile>;
using b_gl = gl<bf16, 1, 1, -1, -1, b_tile>;
using c_gl = gl<float, 1, 1, -1, -1, c_tile>;

struct smem_t {
    static constexpr int bytes = shared_bytes_for<a_tile[STAGES][CONSUMERS], b_tile[STAGES], c_tile[CONSUMERS],
                                                  semaphore[STAGES], semaphore[STAGES]>();
};

// overlap = false: each consumer waits for its wgmma group before releasing the stage.
// overlap = true: it keeps one group in flight (mma_async_wait<1>) and releases the stage of the
// previous iteration instead; correct only if every mma call commits exactly one group.
template <bool overlap>
__global__ __launch_bounds__((CONSUMERS + 1) * WARPGROUP_THREADS, 1) void gemm_kernel(const __grid_constant__ a_gl A,
                                                                                       const __grid_constant__ b_gl B,
                                                                                       const __grid_constant__ c_gl C) {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    auto &as = al.allocate<a_tile, STAGES, CONSUMERS>();
    auto &bs = al.allocate<b_tile, STAGES>();
    auto &cs = al.allocate<c_tile, CONSUMERS>();
    auto &full = al.allocate<semaphore, STAGES>();
    auto &empty = al.allocate<semaphore, STAGES>();
    const int k_tiles = (A.cols() + BK - 1) / BK;

    if (threadIdx.x == 0)
        for (int s = 0; s < STAGES; s++) {
            init_semaphore(full[s], 1);
            init_semaphore(empty[s], CONSUMERS * WARPGROUP_WARPS);
        }
    __syncthreads();

    if (warpgroupid() == 0) {
        warpgroup::decrease_registers<40>();
        if (threadIdx.x == 0) {
            for (int k = 0; k < k_tiles; k++) {
                const int s = k % STAGES;
                if (k >= STAGES) wait(empty[s], (k / STAGES - 1) & 1); // use k/STAGES - 1 of slot s is over
                tma::expect<a_tile, a_tile, b_tile>(full[s]);
                for (int c = 0; c < CONSUMERS; c++) tma::load_async(as[s][c], A, {int(blockIdx.y) * CONSUMERS + c, k}, full[s]);
                tma::load_async(bs[s], B, {int(blockIdx.x), k}, full[s]);
            }
        }
    } else {
        warpgroup::increase_registers<232>();
        const int c = warpgroupid() - 1;
        rt_fl<16, BN> acc;
        for (int k = 0; k < k_tiles; k++) {
            const int s = k % STAGES;
            wait(full[s], (k / STAGES) & 1);
            if (k == 0) warpgroup::mm_ABt(acc, as[s][c], bs[s]);
            else warpgroup::mma_ABt(acc, as[s][c], bs[s]);
            if constexpr (overlap) {
                warpgroup::mma_async_wait<1>();
                if (k > 0 && laneid() == 0) arrive(empty[(k - 1) % STAGES]);
            } else {
                warpgroup::mma_async_wait(acc);
                if (laneid() == 0) arrive(empty[s]);
            }
        }
        if constexpr (overlap) warpgroup::mma_async_wait(acc); // the last stage is never reloaded
        // Accumulator -> shared tile (rt_layout.cuh order), then one TMA store for the slab.
        const int w = warpgroup::warpid(), g = laneid() / 4, t = laneid() % 4;
#pragma unroll
        for (int j = 0; j < BN / 16; j++)
#pragma unroll
            for (int p = 0; p < 4; p++) {
                const int r = 16 * w + g + 8 * (p & 1), col = 16 * j + 2 * t + 8 * (p >> 1);
                cs[c](r, col) = acc.tiles[0][j].data[p].x;
                cs[c](r, col + 1) = acc.tiles[0][j].data[p].y;
            }
        tma::store_fence();
        warpgroup::sync();
        if (warpgroup::laneid() == 0) {
            tma::store_async(C, cs[c], {int(blockIdx.y) * CONSUMERS + c, int(blockIdx.x)});
            tma::store_commit_group();
            tma::store_async_wait();
        }
    }
}

// buffers: A (M, K) bf16, B (N, K) bf16, C (M, N) fp32; args: M, N, K
template <bool overlap> int run_gemm(void **bufs, const long long *args) {
    const int M = int(args[0]), N = int(args[1]), K = int(args[2]);
    a_gl A(static_cast<bf16 *>(bufs[0]), 1, 1, M, K);
    b_gl B(static_cast<bf16 *>(bufs[1]), 1, 1, N, K);
    c_gl C(static_cast<float *>(bufs[2]), 1, 1, M, N);
    if (int e = tk_test::launch_status(gemm_kernel<overlap>, smem_t::bytes)) return e;
    dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    gemm_kernel<overlap><<<grid, (CONSUMERS + 1) * WARPGROUP_THREADS, smem_t::bytes>>>(A, B, C);
    return 0;
}

} // namespace

TK_TEST_REGISTER(wgmma_pipeline) {
    tk_test::add("wgmma_pipeline/bf16_abt", &run_gemm<false>);
    tk_test::add("wgmma_pipeline/bf16_abt_overlap", &run_gemm<true>);
}
