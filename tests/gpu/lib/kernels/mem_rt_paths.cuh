// The register tile load / store kernel shared by mem_register.cu (register and memory element
// types alike) and mem_register_convert.cu (types differ). Each block moves one tile.
//   load path  0: load(rt, gl)            1: load(st, gl) then load(rt, st)
//   store path 0: store(gl, rt)           1: store(st, rt) then store(gl, st)
//              2: every lane writes its registers where rt_layout.cuh says they belong
//                 (tables below, not library code), into a dense buffer of whole tiles.
// Store path 2 pins both load paths to the documented layout (and shows the zero fill outside
// a ragged tensor); paths 0 and 1 then check the stores, including that nothing lands outside.
#pragma once

#include "harness.cuh"

namespace mem_rt_test {

using namespace kittens;

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

// args: rows, cols, in_stride, in_offset, out_stride, out_offset, load_path, store_path
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

// "<registers>/<memory>/<layout>/<rows>x<cols>", the name suffix of the mem_rt* entries.
template <typename R, typename S, typename L> std::string case_tag(int rows, int cols) {
    return std::string(tk_test::dtype_name<R>()) + "/" + tk_test::dtype_name<S>() + "/" + tk_test::layout_name<L>() +
           "/" + tk_test::shape(rows, cols);
}

// Registers mem_rt/<tag>: an R register tile of ROWS x COLS moved to and from S memory.
template <typename R, typename S, typename L, int ROWS, int COLS> void add_paths() {
    tk_test::add("mem_rt/" + case_tag<R, S, L>(ROWS, COLS), &run_rt_paths<rt<R, ROWS, COLS, L>, S>);
}

} // namespace mem_rt_test
