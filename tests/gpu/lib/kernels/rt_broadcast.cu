// Register tiles: row and column broadcasts of a register vector onto a tile.
#include "harness.cuh"
#include "reg_cases.cuh"
#include "rt_io.cuh"

using namespace kittens;

namespace {

// per_row: v is the tile's col_vec (R values, one per row) and the ops are *_row /
// broadcast_row; otherwise v is the row_vec (C values) and the ops are *_col / broadcast_col.
// op: 0 add, 1 sub, 2 mul, 3 div, 4 max, 5 min, 6 broadcast (fill).
// The maps run in place (dst aliases src), as kernels use them.
template <bool per_row, typename T, int R, int C, typename L>
__global__ void broadcast_kernel(const T *x_in, const T *v_in, T *out, int op) {
    using RT = rt<T, R, C, L>;
    using V = std::conditional_t<per_row, typename RT::col_vec, typename RT::row_vec>;
    RT x;
    V v;
    rt_io::load(x, x_in);
    rt_io::load(v, v_in);
    if constexpr (per_row) {
        switch (op) {
        case 0: add_row(x, x, v); break;
        case 1: sub_row(x, x, v); break;
        case 2: mul_row(x, x, v); break;
        case 3: div_row(x, x, v); break;
        case 4: max_row(x, x, v); break;
        case 5: min_row(x, x, v); break;
        default: broadcast_row(x, v); break;
        }
    } else {
        switch (op) {
        case 0: add_col(x, x, v); break;
        case 1: sub_col(x, x, v); break;
        case 2: mul_col(x, x, v); break;
        case 3: div_col(x, x, v); break;
        case 4: max_col(x, x, v); break;
        case 5: min_col(x, x, v); break;
        default: broadcast_col(x, v); break;
        }
    }
    rt_io::store(out, x);
}
template <bool per_row, typename T, int R, int C, typename L> int run_broadcast(void **b, const long long *a) {
    broadcast_kernel<per_row, T, R, C, L><<<1, 32>>>((const T *)b[0], (const T *)b[1], (T *)b[2], int(a[0]));
    return 0;
}

} // namespace

TK_TEST_REGISTER(rt_broadcast) {
    tk_test::for_each_rt_case<float, bf16, half>([]<typename T, typename L, int R, int C>(const std::string &tag) {
        tk_test::add("rt_bcast_row/" + tag, &run_broadcast<true, T, R, C, L>);
        tk_test::add("rt_bcast_col/" + tag, &run_broadcast<false, T, R, C, L>);
    });
}
