// Register tiles: row and column reductions into the tile's vectors, plain and accumulating.
// The result is stored once per replica lane (rt_io::store_replicas), so the test also checks
// that every lane holding a vector element got the same answer.
#include "harness.cuh"
#include "reg_cases.cuh"
#include "rt_io.cuh"

using namespace kittens;

namespace {

// per_row: row_* into the col_vec (R values); otherwise col_* into the row_vec (C values).
// op: 0 max, 1 min, 2 sum, 3 prod. with_acc: dst = op(acc, reduction), written over acc itself
// (dst aliases acc, the usual online-softmax pattern).
template <bool per_row, typename T, int R, int C, typename L>
__global__ void reduce_kernel(const T *x_in, const T *acc_in, T *out, int op, int with_acc) {
    using RT = rt<T, R, C, L>;
    using V = std::conditional_t<per_row, typename RT::col_vec, typename RT::row_vec>;
    RT x;
    V v;
    rt_io::load(x, x_in);
    rt_io::load(v, acc_in);
    if (with_acc) {
        if constexpr (per_row) {
            switch (op) {
            case 0: row_max(v, x, v); break;
            case 1: row_min(v, x, v); break;
            case 2: row_sum(v, x, v); break;
            default: row_prod(v, x, v); break;
            }
        } else {
            switch (op) {
            case 0: col_max(v, x, v); break;
            case 1: col_min(v, x, v); break;
            case 2: col_sum(v, x, v); break;
            default: col_prod(v, x, v); break;
            }
        }
    } else {
        if constexpr (per_row) {
            switch (op) {
            case 0: row_max(v, x); break;
            case 1: row_min(v, x); break;
            case 2: row_sum(v, x); break;
            default: row_prod(v, x); break;
            }
        } else {
            switch (op) {
            case 0: col_max(v, x); break;
            case 1: col_min(v, x); break;
            case 2: col_sum(v, x); break;
            default: col_prod(v, x); break;
            }
        }
    }
    rt_io::store_replicas(out, v);
}
template <bool per_row, typename T, int R, int C, typename L> int run_reduce(void **b, const long long *a) {
    reduce_kernel<per_row, T, R, C, L><<<1, 32>>>((const T *)b[0], (const T *)b[1], (T *)b[2], int(a[0]), int(a[1]));
    return 0;
}

} // namespace

TK_TEST_REGISTER(rt_reduce) {
    tk_test::for_each_rt_case<float, bf16, half>([]<typename T, typename L, int R, int C>(const std::string &tag) {
        tk_test::add("rt_reduce_row/" + tag, &run_reduce<true, T, R, C, L>);
        tk_test::add("rt_reduce_col/" + tag, &run_reduce<false, T, R, C, L>);
    });
}
