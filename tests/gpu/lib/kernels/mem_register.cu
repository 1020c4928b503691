// Register tile loads and stores, per warp, with register and memory element types alike:
// global <-> register directly and through a shared tile (the paths are described in
// mem_rt_paths.cuh), and a register tile read from / written to part of a larger shared tile.
#include "mem_rt_paths.cuh"

using namespace kittens;
using mem_rt_test::add_paths;
using mem_rt_test::case_tag;
using mem_rt_test::gl_of;
using mem_rt_test::strided;

namespace {

// A register tile read from / written to part of a larger shared tile: the whole tile is
// loaded, block (r0, c0) is read into registers and written back over block (r1, c1).
template <typename RT, typename S> __global__ void rt_offset(gl_of<S> in, gl_of<S> out, int r0, int c0, int r1, int c1) {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    using ST = st<S, 2 * RT::rows, 2 * RT::cols>;
    ST &s = al.allocate<ST>();
    load(s, in, {0, 0});
    RT r;
    load(r, s, r0, c0);
    store(s, r, r1, c1);
    store(out, s, {0, 0});
}
// args: r0, c0, r1, c1 (elements); buffers: dense (2R x 2C) in and out
template <typename RT, typename S> int run_rt_offset(void **b, const long long *a) {
    using ST = st<S, 2 * RT::rows, 2 * RT::cols>;
    constexpr int smem = sizeof(ST) + 1024;
    if (int e = tk_test::launch_status(rt_offset<RT, S>, smem)) return e;
    auto in = strided((S *)b[0], ST::rows, ST::cols, ST::cols);
    auto out = strided((S *)b[1], ST::rows, ST::cols, ST::cols);
    rt_offset<RT, S><<<1, 32, smem>>>(in, out, int(a[0]), int(a[1]), int(a[2]), int(a[3]));
    return 0;
}

template <typename R, typename S, typename L> void add_shapes() {
    add_paths<R, S, L, 16, 16>();
    add_paths<R, S, L, 32, 64>();
    add_paths<R, S, L, 64, 32>();
    add_paths<R, S, L, 64, 64>();
}
template <typename R, typename S, typename L, int ROWS, int COLS> void add_offset() {
    tk_test::add("mem_rt_offset/" + case_tag<R, S, L>(ROWS, COLS), &run_rt_offset<rt<R, ROWS, COLS, L>, S>);
}

template <typename L> void add_layout() {
    add_shapes<float, float, L>();
    add_shapes<bf16, bf16, L>();
    add_shapes<half, half, L>();
    add_offset<bf16, bf16, L, 32, 64>();
    add_offset<float, float, L, 16, 16>();
    add_offset<float, half, L, 32, 32>();
}

} // namespace

TK_TEST_REGISTER(mem_register) {
    add_layout<row_l>();
    add_layout<col_l>();
}
