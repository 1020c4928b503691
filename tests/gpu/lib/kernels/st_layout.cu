// Shared tile layout: a tile written element by element through st(r, c) and read back through
// the same accessor must round-trip, and its swizzled address map must be a permutation of the
// tile's bytes (no two elements collide, nothing lands outside the tile).
#include "harness.cuh"

using namespace kittens;

template <typename ST> __global__ void roundtrip(const typename ST::T *in, typename ST::T *out, int *collisions) {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    ST &s = al.allocate<ST>();
    for (int i = threadIdx.x; i < ST::num_elements; i += blockDim.x) s(i / ST::cols, i % ST::cols) = in[i];
    __syncthreads();
    for (int i = threadIdx.x; i < ST::num_elements; i += blockDim.x) out[i] = s(i / ST::cols, i % ST::cols);
    // Every element's byte offset must be distinct and inside the tile.
    if (threadIdx.x == 0) {
        int bad = 0;
        uint32_t base = smem_addr(s.data);
        for (int i = 0; i < ST::num_elements && bad == 0; i++) {
            uint32_t off = s.idx(i / ST::cols, i % ST::cols) - base;
            if (off >= sizeof(s.data) || off % sizeof(typename ST::T) != 0) bad++;
        }
        *collisions = bad;
    }
}

template <typename ST> int run_roundtrip(void **b, const long long *) {
    constexpr int smem = sizeof(ST) + 1024;
    if (int e = tk_test::launch_status(roundtrip<ST>, smem)) return e;
    roundtrip<ST><<<1, 128, smem>>>((const typename ST::T *)b[0], (typename ST::T *)b[1], (int *)b[2]);
    return 0;
}

// st::col_block<C>(k) views the tile's own bytes: element (r, c) of block k is the tile's element (r, C k + c). The
// tile is written through its own accessor and read back through each block's.
template <typename ST, int C> __global__ void col_blocks(const typename ST::T *in, typename ST::T *out) {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    ST &s = al.allocate<ST>();
    for (int i = threadIdx.x; i < ST::num_elements; i += blockDim.x) s(i / ST::cols, i % ST::cols) = in[i];
    __syncthreads();
    for (int k = 0; k < ST::cols / C; k++) {
        const auto &block = s.template col_block<C>(k);
        for (int i = threadIdx.x; i < ST::rows * C; i += blockDim.x) out[(i / C) * ST::cols + k * C + i % C] = block(i / C, i % C);
    }
}

template <typename ST, int C> int run_col_blocks(void **b, const long long *) {
    constexpr int smem = sizeof(ST) + 1024;
    if (int e = tk_test::launch_status(col_blocks<ST, C>, smem)) return e;
    col_blocks<ST, C><<<1, 128, smem>>>((const typename ST::T *)b[0], (typename ST::T *)b[1]);
    return 0;
}

template <typename T, int R, int C, int B> void add_col_blocks() {
    tk_test::add(std::string("st_col_block/") + tk_test::dtype_name<T>() + "/" + tk_test::shape(R, C) + "/" + std::to_string(B),
                 &run_col_blocks<st<T, R, C>, B>);
}

TK_TEST_REGISTER(st_col_block) {
    add_col_blocks<bf16, 64, 256, 128>(); // 128 B swizzle: halves of two chunks (attention's backward at D = 256)
    add_col_blocks<bf16, 64, 96, 32>();   // 64 B swizzle: single chunks
    add_col_blocks<half, 16, 256, 64>();
    add_col_blocks<float, 64, 128, 64>(); // 128 B swizzle of 32 floats
}

// st::row_block<R>(k) of column chunk j views the tile's own bytes: element (r, c) of chunk(j).row_block<R>(k) is the
// tile's element (R k + r, swizzle_elements j + c). The tile is written through its own accessor and read back through
// every block of every chunk; k and j are run-time values, as a consumer's index is.
template <typename ST, int R> __global__ void row_blocks(const typename ST::T *in, typename ST::T *out) {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    ST &s = al.allocate<ST>();
    for (int i = threadIdx.x; i < ST::num_elements; i += blockDim.x) s(i / ST::cols, i % ST::cols) = in[i];
    __syncthreads();
    constexpr int W = ST::swizzle_elements;
    for (int j = 0; j < ST::chunks; j++) {
        for (int k = 0; k < ST::rows / R; k++) {
            const auto &block = s.chunk(j).template row_block<R>(k);
            for (int i = threadIdx.x; i < R * W; i += blockDim.x) out[(R * k + i / W) * ST::cols + W * j + i % W] = block(i / W, i % W);
        }
    }
}

template <typename ST, int R> int run_row_blocks(void **b, const long long *) {
    constexpr int smem = sizeof(ST) + 1024;
    if (int e = tk_test::launch_status(row_blocks<ST, R>, smem)) return e;
    row_blocks<ST, R><<<1, 128, smem>>>((const typename ST::T *)b[0], (typename ST::T *)b[1]);
    return 0;
}

template <typename T, int R, int C, int B> void add_row_blocks() {
    tk_test::add(std::string("st_row_block/") + tk_test::dtype_name<T>() + "/" + tk_test::shape(R, C) + "/" + std::to_string(B),
                 &run_row_blocks<st<T, R, C>, B>);
}

TK_TEST_REGISTER(st_row_block) {
    add_row_blocks<bf16, 64, 256, 32>(); // 32-row halves of the four chunks of a Q tile (attention's backward at D = 256)
    add_row_blocks<bf16, 64, 64, 16>();  // one chunk, blocks of 16 rows (2 KB)
    add_row_blocks<half, 128, 96, 64>(); // 64 B swizzle, three chunks
    add_row_blocks<float, 64, 64, 32>(); // 128 B swizzle of 32 floats, two chunks
}

TK_TEST_REGISTER(st_layout) {
    tk_test::for_each_type<float, bf16, half>([]<typename T>() {
        auto reg = []<int R, int C>() {
            using ST = st<T, R, C>;
            tk_test::add(std::string("st_layout/") + tk_test::dtype_name<T>() + "/" + tk_test::shape(R, C),
                         &run_roundtrip<ST>);
        };
        reg.template operator()<16, 16>();
        reg.template operator()<32, 32>();
        reg.template operator()<64, 64>();
        reg.template operator()<16, 128>();
        reg.template operator()<128, 48>();
    });
}
