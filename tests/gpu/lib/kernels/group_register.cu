// group<N> register slices: the group's block of N * RT::rows rows is shared among its warps in
// 16-row blocks, warp w's register row block h being rows 16*(N*h + w) .. +15 (the wgmma
// accumulator order). Each block of the grid is one group and moves one group block.
//   load path  0: group::load(rt, gl)       1: group::load(st, gl), group::load(rt, st)
//   store path 0: group::store(gl, rt)      1: group::store(st, rt), group::store(gl, st)
//              2: every lane writes its registers where the documented fragment layout and
//                 the row convention above say (written out here, not library code).
#include "harness.cuh"

using namespace kittens;

namespace {

template <typename S> using gl_of = gl<S, 1, 1, -1, -1>;
template <typename S> __host__ gl_of<S> strided(S *p, int rows, int cols, long long stride) {
    return gl_of<S>(p, 1, 1, rows, cols, rows * stride, rows * stride, stride);
}

template <int NW, typename RT, typename T> __device__ void dump_group_fragments(T *dump, int stride, const RT &r) {
    // Pair k of a lane inside a 16x16 base tile (g = lane / 4, t = lane % 4): row layout
    // (g + ROWL_R[k], 2t + ROWL_C[k] + j); col layout (2t + COLL_R[k] + j, g + COLL_C[k]).
    constexpr int ROWL_R[4] = {0, 8, 0, 8}, ROWL_C[4] = {0, 0, 8, 8};
    constexpr int COLL_R[4] = {0, 0, 8, 8}, COLL_C[4] = {0, 8, 0, 8};
    const int lane = laneid(), g = lane / 4, t = lane % 4, w = warpid() % NW;
    for (int h = 0; h < RT::height; h++)
        for (int x = 0; x < RT::width; x++)
            for (int k = 0; k < 4; k++) {
                const typename RT::T2 pair = r.tiles[h][x].data[k];
                const typename RT::T *e = reinterpret_cast<const typename RT::T *>(&pair);
                for (int j = 0; j < 2; j++) {
                    const int row = RT::is_row ? g + ROWL_R[k] : 2 * t + COLL_R[k] + j;
                    const int col = RT::is_row ? 2 * t + ROWL_C[k] + j : g + COLL_C[k];
                    dump[(16 * (NW * h + w) + row) * stride + x * 16 + col] = convert<T>(e[j]);
                }
            }
}

template <typename RT, typename S, int NW>
__global__ void group_rt_paths(gl_of<S> in, gl_of<S> out, S *dump, int dump_stride, int load_path, int store_path) {
    using G = group<NW>;
    constexpr int BLOCK_ROWS = NW * RT::rows;
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    using ST = st<S, BLOCK_ROWS, RT::cols>;
    ST &s = al.allocate<ST>();
    const coord idx{0, 0, int(blockIdx.y), int(blockIdx.x)};
    RT r;
    if (load_path == 0) {
        G::load(r, in, idx);
    } else {
        G::load(s, in, idx);
        __syncthreads();
        G::load(r, s);
    }
    if (store_path == 0) {
        G::store(out, r, idx);
    } else if (store_path == 1) {
        __syncthreads(); // every warp is done reading s
        G::store(s, r);
        __syncthreads();
        G::store(out, s, idx);
    } else {
        dump_group_fragments<NW>(dump + blockIdx.y * BLOCK_ROWS * dump_stride + blockIdx.x * RT::cols, dump_stride, r);
    }
}

// args: rows, cols, in_stride, in_offset, out_stride, out_offset, load_path, store_path
template <typename RT, typename S, int NW> int run_group_rt_paths(void **b, const long long *a) {
    constexpr int BLOCK_ROWS = NW * RT::rows;
    using ST = st<S, BLOCK_ROWS, RT::cols>;
    constexpr int smem = sizeof(ST) + 1024;
    if (int e = tk_test::launch_status(group_rt_paths<RT, S, NW>, smem)) return e;
    const int rows = int(a[0]), cols = int(a[1]);
    const dim3 grid((cols + RT::cols - 1) / RT::cols, (rows + BLOCK_ROWS - 1) / BLOCK_ROWS);
    auto in = strided((S *)b[0] + a[3], rows, cols, a[2]);
    auto out = strided((S *)b[1] + a[5], rows, cols, a[4]);
    group_rt_paths<RT, S, NW><<<grid, NW * 32, smem>>>(in, out, (S *)b[2], int(grid.x * RT::cols), int(a[6]), int(a[7]));
    return 0;
}

template <typename R, typename S, typename L, int NW, int ROWS, int COLS> void add_one() {
    using RT = rt<R, ROWS, COLS, L>;
    tk_test::add(std::string("group_rt/group") + std::to_string(NW) + "/" + tk_test::dtype_name<R>() + "/" +
                     tk_test::dtype_name<S>() + "/" + tk_test::layout_name<L>() + "/" + tk_test::shape(ROWS, COLS),
                 &run_group_rt_paths<RT, S, NW>);
}
template <typename R, typename S, typename L, int NW> void add_shapes() {
    add_one<R, S, L, NW, 16, 16>();
    add_one<R, S, L, NW, 16, 64>();
    add_one<R, S, L, NW, 32, 64>();
}
template <int NW> void add_scope() {
    add_shapes<float, bf16, row_l, NW>(); // wgmma accumulators written out as bf16
    add_shapes<float, bf16, col_l, NW>();
    add_shapes<bf16, bf16, row_l, NW>();
    add_shapes<bf16, bf16, col_l, NW>();
    add_shapes<float, float, row_l, NW>();
}

} // namespace

TK_TEST_REGISTER(group_register) {
    add_scope<2>();
    add_scope<4>();
}
