// Global <-> shared copies of tiles and vectors, per warp (NW = 1: the free functions) and per
// group (NW = 2, 4: group<NW>:: members). Each block moves one tile / vector:
//   mode 0: load(s, in)            synchronous
//   mode 1: load_async(s, in); load_async_wait()
//   mode 2: two load_async into s and s2, load_async_wait<1>() then load_async_wait<0>()
// then the shared object is dumped element by element (its own accessor, not library copies)
// into a dense buffer of whole tiles, which shows the zero fill past a ragged edge, and written
// back with store(out, s), which must not touch anything outside the tensor.
#include "harness.cuh"

using namespace kittens;

namespace {

template <typename S> using gl_of = gl<S, 1, 1, -1, -1>;
template <typename S> __host__ gl_of<S> strided(S *p, int rows, int cols, long long stride) {
    return gl_of<S>(p, 1, 1, rows, cols, rows * stride, rows * stride, stride);
}

// A shared tile is ROWS x COLS; a shared vector is one row of `length` elements.
template <typename SH> struct extent;
template <typename T, int R, int C> struct extent<st<T, R, C>> {
    static constexpr int rows = R, cols = C;
    static __device__ T get(const st<T, R, C> &s, int r, int c) { return s(r, c); }
};
template <typename T, int L> struct extent<sv<T, L>> {
    static constexpr int rows = 1, cols = L;
    static __device__ T get(const sv<T, L> &s, int, int c) { return s[c]; }
};

template <int NW, typename SH, typename GL> __device__ void scoped_load(SH &s, const GL &g, const coord &idx) {
    if constexpr (NW == 1) load(s, g, idx);
    else group<NW>::load(s, g, idx);
}
template <int NW, typename SH, typename GL> __device__ void scoped_load_async(SH &s, const GL &g, const coord &idx) {
    if constexpr (NW == 1) load_async(s, g, idx);
    else group<NW>::load_async(s, g, idx);
}
template <int NW, int N> __device__ void scoped_wait() {
    if constexpr (NW == 1) load_async_wait<N>();
    else group<NW>::template load_async_wait<N>();
}
template <int NW, typename SH, typename GL> __device__ void scoped_store(const GL &g, const SH &s, const coord &idx) {
    if constexpr (NW == 1) store(g, s, idx);
    else group<NW>::store(g, s, idx);
}

template <typename SH>
__device__ void dump_shared(typename SH::T *dump, int stride, const SH &s, int tid, int threads) {
    using E = extent<SH>;
    for (int i = tid; i < E::rows * E::cols; i += threads)
        dump[(blockIdx.y * E::rows + i / E::cols) * stride + blockIdx.x * E::cols + i % E::cols] = E::get(s, i / E::cols, i % E::cols);
}

template <typename SH, int NW>
__global__ void shared_copy(gl_of<typename SH::T> in, gl_of<typename SH::T> out, typename SH::T *dump, int dump_stride, int mode) {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    SH &s = al.allocate<SH>();
    SH &s2 = al.allocate<SH>();
    // Tiles count rows in tile heights; vectors take the row itself. Both: blockIdx.y, blockIdx.x.
    const coord idx{0, 0, int(blockIdx.y), int(blockIdx.x)};
    if (mode == 0) {
        scoped_load<NW>(s, in, idx);
        __syncthreads();
    } else if (mode == 1) {
        scoped_load_async<NW>(s, in, idx);
        scoped_wait<NW, 0>();
    } else {
        scoped_load_async<NW>(s2, in, idx);
        scoped_load_async<NW>(s, in, idx);
        scoped_wait<NW, 1>(); // s2 (the older group) is complete
        dump_shared(dump, dump_stride, s2, threadIdx.x, blockDim.x);
        scoped_wait<NW, 0>();
        __syncthreads();
        scoped_store<NW>(out, s, idx);
        return;
    }
    dump_shared(dump, dump_stride, s, threadIdx.x, blockDim.x);
    scoped_store<NW>(out, s, idx);
}

// args: rows, cols, in_stride, in_offset, out_stride, out_offset, mode
template <typename SH, int NW> int run_shared_copy(void **b, const long long *a) {
    using T = typename SH::T;
    using E = extent<SH>;
    constexpr int smem = 2 * ((sizeof(SH) + 1023) / 1024 * 1024) + 1024;
    if (int e = tk_test::launch_status(shared_copy<SH, NW>, smem)) return e;
    const int rows = int(a[0]), cols = int(a[1]);
    const dim3 grid((cols + E::cols - 1) / E::cols, (rows + E::rows - 1) / E::rows);
    auto in = strided((T *)b[0] + a[3], rows, cols, a[2]);
    auto out = strided((T *)b[1] + a[5], rows, cols, a[4]);
    shared_copy<SH, NW><<<grid, NW * 32, smem>>>(in, out, (T *)b[2], int(grid.x * E::cols), int(a[6]));
    return 0;
}

template <int NW> std::string scope_name() { return NW == 1 ? "warp" : "group" + std::to_string(NW); }

template <typename T, int NW, int R, int C> void add_tile() {
    tk_test::add(std::string("mem_st/") + scope_name<NW>() + "/" + tk_test::dtype_name<T>() + "/" + tk_test::shape(R, C),
                 &run_shared_copy<st<T, R, C>, NW>);
}
template <typename T, int NW, int L> void add_vec() {
    tk_test::add(std::string("mem_sv/") + scope_name<NW>() + "/" + tk_test::dtype_name<T>() + "/" + std::to_string(L),
                 &run_shared_copy<sv<T, L>, NW>);
}

// 16-bit and fp32 tiles: 16x16 and 16x48 exercise the 32- and 64-byte swizzles.
template <typename T, int NW> void add_wide_type() {
    add_tile<T, NW, 16, 16>();
    add_tile<T, NW, 64, 128>();
    if constexpr (NW == 1) {
        add_tile<T, NW, 32, 64>();
        add_tile<T, NW, 128, 64>();
        add_tile<T, NW, 16, 48>();
    }
    add_vec<T, NW, 16>();
    add_vec<T, NW, 128>();
    if constexpr (NW == 1) add_vec<T, NW, 64>();
}
template <int NW> void add_scope() {
    add_wide_type<float, NW>();
    add_wide_type<bf16, NW>();
    add_wide_type<half, NW>();
    // fp8 tile rows must be a multiple of 32 bytes.
    add_tile<fp8e4m3, NW, 32, 64>();
    add_tile<fp8e4m3, NW, 64, 128>();
    add_vec<fp8e4m3, NW, 16>();
    add_vec<fp8e4m3, NW, 64>();
    if constexpr (NW == 1) add_tile<fp8e4m3, NW, 32, 96>();
}

} // namespace

TK_TEST_REGISTER(mem_shared) {
    add_scope<1>();
    add_scope<2>();
    add_scope<4>();
}
