// Register tile loads and stores where the register element type differs from the memory one
// (a float tile stored into a bf16 tensor, an fp8 tensor read into float registers, ...).
// Same kernel and paths as mem_register.cu; see there.
#include "harness.cuh"

using namespace kittens;

namespace {

template <typename RT, typename T> __device__ void dump_fragments(T *dump, int stride, const RT &r) {
    // Where pair k of a lane lives inside a 16x16 base tile (g = lane / 4, t = lane % 4): row
    // layout (g + ROWL_R[k], 2t + ROWL_C[k] + j); col layout (2t + COLL_R[k] + j, g + COLL_C[k]).
    constexpr int ROWL_R[4] = {0, 8, 0, 8}, ROWL_C[4] = {0, 0, 8, 8};
    constexpr int COLL_R[4] = {0, 0, 8, 8}, COLL_C[4] = {0, 8, 0, 8};
    const int lane = laneid(), g = lane / 4, t = lane % 4;
    for (int h = 0; h < RT::height; h++)
        for (int w = 0; w < RT::width; w++)
            for (int k = 0; k < 4; k++) {
                const typename RT::T2 pair = r.tiles[h][w].data[k];
                const typename RT::T *e = reinterpret_cast<const typename RT::T *>(&pair);
                for (int j = 0; j < 2; j++) {
                    const int row = RT::is_row ? g + ROWL_R[k] : 2 * t + COLL_R[k] + j;
                    const int col = RT::is_row ? 2 * t + ROWL_C[k] + j : g + COLL_C[k];
                    dump[(h * 16 + row) * stride + w * 16 + col] = convert<T>(e[j]);
                }
            }
}

template <typename S> using gl_of = gl<S, 1, 1, -1, -1>;
template <typename S> __host__ gl_of<S> strided(S *p, int rows, int cols, long long stride) {
    return gl_of<S>(p, 1, 1, rows, cols, rows * stride, rows * stride, stride);
}

template <typename RT, typename S>
__global__ void rt_paths(gl_of<S> in, gl_of<S> out, S *dump, int dump_stride, int load_path, int store_path) {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    using ST = st<S, RT::rows, RT::cols>;
    ST &s = al.allocate<ST>();
    const coord idx{0, 0, int(blockIdx.y), int(blockIdx.x)};
    RT r;
    if (load_path == 0) {
        load(r, in, idx);
    } else {
        load(s, in, idx);
        load(r, s);
    }
    if (store_path == 0) {
        store(out, r, idx);
    } else if (store_path == 1) {
        store(s, r);
        store(out, s, idx);
    } else {
        dump_fragments(dump + blockIdx.y * RT::rows * dump_stride + blockIdx.x * RT::cols, dump_stride, r);
    }
}

template <typename RT, typename S> int run_rt_paths(void **b, const long long *a) {
    using ST = st<S, RT::rows, RT::cols>;
    constexpr int smem = sizeof(ST) + 1024;
    if (int e = tk_test::launch_status(rt_paths<RT, S>, smem)) return e;
    const int rows = int(a[0]), cols = int(a[1]);
    const dim3 grid((cols + RT::cols - 1) / RT::cols, (rows + RT::rows - 1) / RT::rows);
    auto in = strided((S *)b[0] + a[3], rows, cols, a[2]);
    auto out = strided((S *)b[1] + a[5], rows, cols, a[4]);
    rt_paths<RT, S><<<grid, 32, smem>>>(in, out, (S *)b[2], int(grid.x * RT::cols), int(a[6]), int(a[7]));
    return 0;
}

template <typename R, typename S, typename L, int ROWS, int COLS> void add_paths() {
    using RT = rt<R, ROWS, COLS, L>;
    tk_test::add(std::string("mem_rt/") + tk_test::dtype_name<R>() + "/" + tk_test::dtype_name<S>() + "/" +
                     tk_test::layout_name<L>() + "/" + tk_test::shape(ROWS, COLS),
                 &run_rt_paths<RT, S>);
}

template <typename L> void add_layout() {
    add_paths<float, bf16, L, 16, 16>();
    add_paths<float, bf16, L, 32, 64>();
    add_paths<float, bf16, L, 64, 32>();
    add_paths<float, half, L, 16, 16>();
    add_paths<float, half, L, 32, 64>();
    add_paths<bf16, float, L, 16, 16>();
    add_paths<bf16, float, L, 64, 32>();
    add_paths<float, fp8e4m3, L, 32, 64>();
    add_paths<float, fp8e4m3, L, 64, 32>();
    add_paths<half, fp8e4m3, L, 32, 32>();
}

} // namespace

TK_TEST_REGISTER(mem_register_convert) {
    add_layout<row_l>();
    add_layout<col_l>();
}
